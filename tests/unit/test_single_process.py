"""What one process can check without mpiexec (MPI runs as a world of one): the store and
its device copies, bucket plans, the knobs and faults and their refusals, a save that fails
midway, and the launcher's command."""

import os
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

import mxkv_hybrid
from mxkv_hybrid.config import Config, Fault, parse_fault
from mxkv_hybrid.errors import ConfigError, MXKVError
from mxkv_hybrid.launch.launcher import parse_arguments, wrap_command
from mxkv_hybrid.safety.fault import FaultInjector

FLOAT32, FLOAT64, FLOAT16 = 0, 1, 2


def test_the_plugin_registers_class_hybrid():
    kv = mx.kv.create("hybrid")
    assert type(kv).__name__ == "Hybrid" and isinstance(kv, mxkv_hybrid.Hybrid)
    assert (kv.rank, kv.num_workers, kv.type) == (0, 1, "hybrid")


def test_the_string_store_survives_one_device():
    net = mx.gluon.nn.Dense(2, in_units=3)
    net.initialize()
    trainer = mx.gluon.Trainer(
        net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="hybrid"
    )
    trainer._init_kvstore()
    assert isinstance(trainer._kvstore, mxkv_hybrid.Hybrid)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("size", [1, 7, 1_000_003])
def test_device_copies_are_summed_and_broadcast(dtype, size):
    kv = mx.kv.create("hybrid")
    rng = np.random.RandomState(size)
    values = [rng.rand(size).astype(dtype) for _ in range(3)]
    arrays = [mx.nd.array(v, ctx=mx.cpu(i), dtype=dtype) for i, v in enumerate(values)]
    kv.pushpull("x", arrays)
    expected = (values[0].astype(np.float64) + values[1] + values[2]).astype(dtype)
    tolerance = 2e-3 if dtype == "float16" else 1e-6
    for a in arrays:
        np.testing.assert_allclose(a.asnumpy(), expected, rtol=tolerance)


def test_many_small_keys_in_one_call():
    kv = mx.kv.create("hybrid")
    keys = list(range(300))
    arrays = [[mx.nd.ones((k % 5 + 1,)) * k, mx.nd.ones((k % 5 + 1,), ctx=mx.cpu(1))] for k in keys]
    kv.pushpull(keys, arrays)
    assert all(np.all(a[0].asnumpy() == k + 1) for k, a in zip(keys, arrays))


def test_bucket_plan_fuses_small_tensors_and_keeps_large_ones_whole():
    kv = mx.kv.create("hybrid")
    cap = kv.config.bucket_bytes // 4
    plan = kv._collectives.plan(
        [(FLOAT32, 10), (FLOAT32, 2 * cap + 1), (FLOAT64, 3), (FLOAT32, cap - 10), (FLOAT32, 1)]
    )
    in_place = [b for b in plan if not b[0]]
    fused = [b for b in plan if b[0]]
    assert [segments for _, segments in in_place] == [[(1, 0, 2 * cap + 1)]]
    # float32: 10 + (cap - 10) fill one bucket; the last element opens the next one
    assert [segments for _, segments in fused] == [
        [(0, 0, 10), (3, 0, cap - 10)],
        [(4, 0, 1)],
        [(2, 0, 3)],
    ]


def test_arrays_that_disagree_on_one_rank_name_the_key():
    kv = mx.kv.create("hybrid")
    with pytest.raises(MXKVError, match="key 'w': its arrays disagree on this rank"):
        kv.pushpull("w", [mx.nd.ones((2, 3)), mx.nd.ones((3, 2), ctx=mx.cpu(1))])
    with pytest.raises(MXKVError, match=r"int32.*not supported|dtype code 4"):
        kv.pushpull("i", mx.nd.ones((2,), dtype="int32"))


def test_unsupported_features_say_what_to_use_instead():
    kv = mx.kv.create("hybrid")
    with pytest.raises(MXKVError, match=r"threshold -1\.0 must be above 0"):
        kv.set_gradient_compression({"type": "2bit", "threshold": -1})
    with pytest.raises(MXKVError, match="not initialised; call init first") as unknown:
        kv.pull("never", out=mx.nd.zeros((1,)))
    assert isinstance(unknown.value, mx.base.MXNetError)  # what MXNet's stores raise there
    kv.close()
    with pytest.raises(MXKVError, match="closed"):
        kv.pushpull(0, mx.nd.ones((1,)))


def test_config_defaults_and_errors():
    config = Config.from_environment({})
    assert (config.mode, config.bucket_bytes, config.average) == ("allreduce", 1 << 20, True)
    assert (
        Config.from_environment({"MXKV_AVERAGE": "off", "MXKV_BUCKET_MB": "0.5"}).bucket_bytes
        == 512 << 10
    )
    with pytest.raises(ConfigError, match="unknown setting MXKV_NOPE"):
        Config.from_environment({"MXKV_NOPE": "1"})
    with pytest.raises(ConfigError, match="MXKV_BUCKET_MB='big' is invalid"):
        Config.from_environment({"MXKV_BUCKET_MB": "big"})


def test_launcher_runs_python_scripts_through_the_runner():
    assert wrap_command(["python", "train.py", "--kv-store", "hybrid"]) == [
        sys.executable,
        "-m",
        "mxkv_hybrid.run",
        "train.py",
        "--kv-store",
        "hybrid",
    ]
    assert wrap_command(["python3", "-m", "pkg.train"]) == [
        sys.executable,
        "-m",
        "mxkv_hybrid.run",
        "-m",
        "pkg.train",
    ]
    assert wrap_command(["python", "-u", "-W", "ignore", "t.py", "a"]) == [
        sys.executable,
        "-u",
        "-W",
        "ignore",
        "-m",
        "mxkv_hybrid.run",
        "t.py",
        "a",
    ]
    assert wrap_command(["python", "-c", "print(1)"]) == [sys.executable, "-c", "print(1)"]
    assert wrap_command(["./train.sh", "x"]) == ["./train.sh", "x"]
    plan = parse_arguments(["-n", "4", "-H", "a:2,b:2", "--", "python", "t.py"])
    assert (plan.num_ranks, plan.hosts, plan.command) == (4, "a:2,b:2", ("python", "t.py"))


@pytest.mark.parametrize("mode", [None, "allreduce", "lasgd"])
def test_launcher_refuses_servers_for_modes_without_a_parameter_server(monkeypatch, capsys, mode):
    if mode is None:
        monkeypatch.delenv("MXKV_MODE", raising=False)
    else:
        monkeypatch.setenv("MXKV_MODE", mode)
    with pytest.raises(SystemExit):
        parse_arguments(["-n", "2", "--servers", "1", "--", "python", "t.py"])
    assert (
        f"MXKV_MODE is {mode or 'allreduce (unset)'}, which uses no parameter server"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", None),
        ("kill:rank=1:step=5", Fault("kill", 1, 5)),
        (" HANG:step=2:rank=0 ", Fault("hang", 0, 2)),
    ],
)
def test_fault_knob_parses(text, expected):
    assert parse_fault(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "kill",
        "explode:rank=1:step=5",
        "kill:rank=1:step=0",
        "kill:rank=-1:step=5",
        "kill:rank=1:step=5:when=now",
        "kill:rank=one:step=5",
    ],
)
def test_bad_fault_knobs_are_refused(text):
    with pytest.raises(ConfigError, match=r"MXKV_FAULT=.*expected ACTION:rank=R:step=S"):
        Config.from_environment({"MXKV_FAULT": text})


def test_a_fault_for_another_rank_does_nothing():
    injector = FaultInjector(Fault("raise", 1, 1), rank=0)
    injector.step()
    injector = FaultInjector(Fault("raise", 0, 2), rank=0)
    injector.step()
    with pytest.raises(RuntimeError, match="MXKV_FAULT: injected failure on rank 0 at step 2"):
        injector.step()


def test_the_summary_knob_takes_a_number_of_steps():
    assert Config.from_environment({}).summary_every == 0
    assert Config.from_environment({"MXKV_SUMMARY_EVERY": "50"}).summary_every == 50
    with pytest.raises(
        ConfigError,
        match="MXKV_SUMMARY_EVERY='-5' is invalid: expected a whole number of steps, 0 for off",
    ):
        Config.from_environment({"MXKV_SUMMARY_EVERY": "-5"})


def test_a_save_that_fails_midway_leaves_the_last_checkpoint(tmp_path, monkeypatch):
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize(mx.init.Constant(1.0))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=None)
    mxkv_hybrid.checkpoint.save(str(tmp_path), net, trainer)
    net.weight.set_data(mx.nd.full((2, 3), 7.0))

    def disk_full(fname: str) -> None:  # the weights are written, the states are not
        raise OSError("No space left on device")

    monkeypatch.setattr(trainer, "save_states", disk_full)
    with pytest.raises(OSError, match="No space left"):
        mxkv_hybrid.checkpoint.save(str(tmp_path), net, trainer)
    monkeypatch.undo()
    assert "rank0.g2.params" in os.listdir(tmp_path)  # written, but never committed
    mxkv_hybrid.checkpoint.load(str(tmp_path), net, trainer)
    assert (net.weight.data().asnumpy() == 1.0).all()  # the first save's weights

    net.weight.set_data(mx.nd.full((2, 3), 7.0))
    mxkv_hybrid.checkpoint.save(str(tmp_path), net, trainer)  # commits, then clears the old
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "rank0.g2.params", "rank0.g2.states"]
    net.weight.set_data(mx.nd.zeros((2, 3)))
    mxkv_hybrid.checkpoint.load(str(tmp_path), net, trainer)
    assert (net.weight.data().asnumpy() == 7.0).all()


def test_broadcasting_parameters_of_unknown_shape_says_to_run_a_batch_first():
    net = gluon.nn.Dense(3)  # no in_units: its weight's shape waits for the first batch
    net.initialize()
    with pytest.raises(
        MXKVError,
        match=r"1 parameter\(s\) have no shape yet .*dense\d+_weight"
        r".*run one batch through the network first",
    ):
        mxkv_hybrid.broadcast_parameters(net.collect_params())
    net(mx.nd.ones((2, 4)))
    mxkv_hybrid.broadcast_parameters(net.collect_params())  # shapes known: one rank keeps its own


def test_csr_arrays_are_refused_and_row_sparse_ones_kept_saying_what_to_use():
    """docs/troubleshooting.md: csr arrays and compression types other than 2bit and 1bit raise
    MXKVError naming the alternative; row_sparse arrays are kept and pulled by rows (one
    rank: the sum is the array itself)."""
    kv = mx.kv.create("hybrid")
    csr = mx.nd.ones((4, 3)).tostype("csr")
    for call in (lambda: kv.init(0, csr), lambda: kv.pushpull(1, csr)):
        with pytest.raises(
            MXKVError,
            match=r"csr arrays .* are not supported by the hybrid "
            r"kvstore; use row_sparse or dense arrays",
        ):
            call()
    rows = mx.nd.sparse.row_sparse_array((np.ones((2, 3)), [1, 3]), shape=(4, 3))
    kv.init(2, rows)
    out = mx.nd.sparse.zeros("row_sparse", (4, 3))
    kv.row_sparse_pull(2, out=out, row_ids=mx.nd.array([3, 0, 3], dtype="int64"))
    assert out.asnumpy().tolist() == [[0] * 3, [0] * 3, [0] * 3, [1] * 3]  # row 1 not asked for
    for unknown in ({"type": "4bit"}, {"type": "1bit", "threshold": 0.5}):
        with pytest.raises(
            MXKVError,
            match=r"takes MXNet's \{'type': '2bit', 'threshold': t\} "
            r".* or \{'type': '1bit'\}",
        ):
            kv.set_gradient_compression(unknown)


def test_two_bit_and_sixteen_bit_compression_are_not_combined(monkeypatch):
    monkeypatch.setenv("MXKV_COMPRESS", "fp16")
    kv = mx.kv.create("hybrid")
    with pytest.raises(
        MXKVError, match="MXKV_COMPRESS=fp16 already compresses float32 values; use one of the two"
    ):
        kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})

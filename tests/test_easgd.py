"""MXKV_MODE=easgd with real MPI groups and ps-lite servers: the elastic exchange follows
the formulas exactly and conserves weights + centre; groups train a convex problem."""
import json
import re

import numpy as np
import pytest

from mxkv_hybrid.config import Config
from mxkv_hybrid.errors import ConfigError

import averaging_reference as reference
from conftest import launch, load_ranks

EASGD = {"MXKV_MODE": "easgd"}
ALPHA = 0.25
START = np.array([2.0, -1.0, 0.5])  # broadcast by easgd_exchange.py, then group 1 moves
MOVE = np.array([4.0, 2.0, -1.0])   # by this ("local steps")


def exchanges(expected: int, *args: str, **env: str) -> list:
    """The records easgd_exchange.py prints: 2 groups of 1 rank, 1 server, in one MPI job
    (the worker orders the groups' exchanges and gathers their weights through MPI)."""
    job = launch(2, "easgd_exchange.py", *args, env=dict(EASGD, MXKV_EASGD_ALPHA=str(ALPHA), **env),
                 launcher_options=["--group-size", "1", "--servers", "1"]
                 + ([] if env.get("MXKV_EASGD_SYNC") else ["--one-job"]), timeout=120)
    assert job.returncode == 0, job.output
    seen = [json.loads(line.split("EXCHANGE ", 1)[1]) for line in job.lines_of(0)
            if line.startswith("EXCHANGE ")]
    assert len(seen) == expected, job.output
    return seen


def test_elastic_exchanges_follow_the_formulas_and_conserve_the_sum():
    seen = exchanges(6)
    x = [START.copy(), START + MOVE]
    centre = START.copy()
    total = x[0] + x[1] + centre
    for record in seen:  # the formulas, in the order the groups exchanged
        e = ALPHA * (x[record["group"]] - centre)
        x[record["group"]] = x[record["group"]] - e
        centre = centre + e
        np.testing.assert_allclose(record["weights"], x, rtol=0, atol=1e-6)
        np.testing.assert_allclose(record["centre"], centre, rtol=0, atol=1e-6)
        np.testing.assert_allclose(np.sum(record["weights"], axis=0) + record["centre"], total,
                                   rtol=0, atol=1e-5)


def test_synchronous_exchanges_move_the_centre_by_the_sum_of_the_groups():
    seen = exchanges(3, "together", MXKV_EASGD_SYNC="1")
    x = np.array([START, START + MOVE])
    centre = START.copy()
    for record in seen:  # c += alpha sum_g (x_g - c); x_g -= alpha (x_g - c), same c for all
        e = ALPHA * (x - centre)
        x, centre = x - e, centre + e.sum(axis=0)
        np.testing.assert_allclose(record["weights"], x, rtol=0, atol=1e-6)
        np.testing.assert_allclose(record["centre"], centre, rtol=0, atol=1e-6)


@pytest.mark.parametrize("sync", ["0", "1"])
def test_easgd_groups_reach_the_optimum_of_a_convex_problem(job_dir, sync):
    steps, tau = 200, 4
    job = launch(4, "train_convex.py", str(job_dir), str(steps),
                 env=dict(EASGD, MXKV_TAU=str(tau), MXKV_EASGD_SYNC=sync),
                 launcher_options=["--group-size", "2", "--servers", "1"], timeout=180)
    assert job.returncode == 0, job.output
    for rank in range(4):
        text = "\n".join(job.lines_of(rank))
        loss = re.search(r"group-final loss ([0-9.e-]+) \(zero-weight loss ([0-9.]+)\)", text)
        # within 1e-3 of the zero-weight loss: asynchronous exchanges depend on scheduling
        # (seen: 5e-5 in 5 quiet runs, 1.7e-3 once under a loaded CI run; zero-weight 7.2)
        assert loss and float(loss.group(1)) < 1e-3 * float(loss.group(2)), job.output
        assert f"elastic exchanges {steps // tau} (alpha 0.45)" in text, job.output
    weights = load_ranks(job_dir, 4)
    for first, second in ((0, 1), (2, 3)):  # synchronous SGD inside a group
        for name in weights[first]:
            assert np.array_equal(weights[first][name], weights[second][name]), name


def test_module_fit_in_easgd_mode_updates_locally_and_exchanges_every_tau_steps(job_dir):
    """Then consensus (every rank takes the centre) and a save/load of the states."""
    job = launch(4, "train_module.py", "--out", str(job_dir), "--averaging-checks",
                 env=dict(EASGD, MXKV_TAU="2"),
                 launcher_options=["--group-size", "2", "--servers", "1"], timeout=180)
    assert job.returncode == 0, job.output
    for rank in range(4):  # 5 steps: exchanges after steps 2 and 4
        text = " ".join(job.lines_of(rank))
        assert "update_on_kvstore=False" in text and "averaging_rounds=2" in text, job.output
        assert "averaging steps after load=5" in text, job.output
    weights = load_ranks(job_dir, 4)
    for rank in (1, 2, 3):
        for name in weights[0]:
            assert np.array_equal(weights[0][name], weights[rank][name]), (rank, name)


SYNC_TAU, SYNC_WARMUP, SYNC_STEPS = 2, 1, 7


def trainer_steps(job_dir, *args: str):
    """averaging_steps.py: synchronous EASGD through the Trainer hooks, 2 groups of 1 rank;
    (STEP records, CONSENSUS or None)."""
    env = dict(EASGD, MXKV_EASGD_SYNC="1", MXKV_TAU=str(SYNC_TAU),
               MXKV_WARMUP_STEPS=str(SYNC_WARMUP))
    job = launch(2, "averaging_steps.py", str(job_dir), *args, env=env, timeout=120,
                 launcher_options=["--group-size", "1", "--servers", "1"])
    assert job.returncode == 0, job.output
    lines = job.lines_of(0)
    consensus = [json.loads(line[10:]) for line in lines if line.startswith("CONSENSUS ")]
    return ([json.loads(line[5:]) for line in lines if line.startswith("STEP ")],
            consensus[0] if consensus else None)


@pytest.mark.parametrize("optimizer", ["sgd", "nag"])  # nag: EAMSGD
def test_trainer_steps_follow_synchronous_easgd_and_eamsgd(job_dir, optimizer):
    seen, agreed = trainer_steps(job_dir, str(SYNC_STEPS), optimizer, "--consensus")
    expected = reference.easgd_sync(SYNC_STEPS, 2, SYNC_TAU, SYNC_WARMUP, 0.45, optimizer)
    assert [r["step"] for r in seen] == list(range(1, SYNC_STEPS + 1))
    for record, want in zip(seen, expected):
        np.testing.assert_allclose(record["weights"], want["weights"], rtol=0, atol=1e-5,
                                   err_msg=f"step {record['step']}")
        np.testing.assert_allclose(record["centre"], want["centre"], rtol=0, atol=1e-5,
                                   err_msg=f"step {record['step']}")
    np.testing.assert_allclose(agreed, [expected[-1]["centre"]] * 2, rtol=0, atol=1e-5)


def test_easgd_checkpoint_resumes_the_same_trajectory(tmp_path):
    """Saved after step 4 (exchanges after steps 3, 5, 7): weights, momentum, the centre
    on the servers and the step counter come back."""
    straight, _ = trainer_steps(tmp_path / "straight", str(SYNC_STEPS), "nag")
    trainer_steps(tmp_path / "first", str(SYNC_STEPS), "nag", "--save", "4", str(tmp_path / "ckpt"))
    resumed, _ = trainer_steps(tmp_path / "second", str(SYNC_STEPS), "nag", "--resume",
                               str(tmp_path / "ckpt"))
    assert [r["step"] for r in resumed] == list(range(5, SYNC_STEPS + 1))
    for record, want in zip(resumed, straight[4:]):
        np.testing.assert_allclose(record["weights"], want["weights"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(record["centre"], want["centre"], rtol=0, atol=1e-6)
    for rank in range(2):
        assert int(np.load(tmp_path / "second" / f"rank{rank}.npz")["rounds"]) == 3


@pytest.mark.parametrize("setting, message", [
    ({"MXKV_TAU": "0"}, "MXKV_TAU='0' is invalid"),
    ({"MXKV_EASGD_ALPHA": "1.5"}, "MXKV_EASGD_ALPHA='1.5' is invalid"),
    ({"MXKV_EASGD_BETA": "-1"}, "MXKV_EASGD_BETA='-1' is invalid"),
])
def test_bad_easgd_settings_are_refused(setting, message):
    with pytest.raises(ConfigError, match=message):
        Config.from_environment(dict(EASGD, **setting))


@pytest.mark.parametrize("mode, launcher_options, means", [
    ("easgd", ["--group-size", "1", "--servers", "1", "--one-job"], [2.0, 2.0, 2.0]),
    ("easgd", ["--group-size", "1", "--servers", "1"], [1.0, 2.0, 3.0]),  # group jobs
    ("lasgd", [], [2.0, 2.0, 2.0])])
def test_values_that_are_not_weights_are_averaged_over_all_ranks(mode, launcher_options, means):
    """Metrics pushed through the store (rank r pushes r + 1): the mean over every rank in
    one MPI job, not over one group; with each group its own MPI job (easgd's default
    layout) the mean over the group, here one rank."""
    job = launch(3, "average.py", env={"MXKV_MODE": mode}, launcher_options=launcher_options,
                 timeout=90)
    assert job.returncode == 0, job.output
    for rank, mean in enumerate(means):
        assert f"RESULT Hybrid rank={rank} of 3 value=[{mean}, {mean}, {mean}]" in \
            job.lines_of(rank), job.output

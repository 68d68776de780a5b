"""Shard parallelism (mxkv_hybrid.shard): the partitioner, the order of a model's tasks,
the device budget, and real 2-rank jobs whose K models must end where each model
trained alone ends, without any rank holding more than its budget."""

import json

import numpy as np
import pytest

from mxkv_hybrid.errors import MXKVError
from mxkv_hybrid.shard import ModelTask, ShardOrchestrator
from mxkv_hybrid.shard.device_budget import DeviceBudget
from mxkv_hybrid.shard.footprint import LayerFootprint, shard_bytes
from mxkv_hybrid.shard.model_chain import ModelChain
from mxkv_hybrid.shard.partition import partition

from conftest import launch, load_ranks, run_reference

RANKS, MODELS, EPOCHS, BATCHES = 2, 4, 2, 4  # (the worker's defaults)


def dense(position: int, inputs: int, outputs: int, batch: int = 8) -> LayerFootprint:
    """A dense layer's footprint with SGD momentum (one state array per parameter)."""
    shapes = (("w", (outputs, inputs)), ("b", (outputs,)))
    return LayerFootprint(
        f"{position} (Dense d{position})",
        shapes,
        (2 * position, 2 * position + 1),
        (),
        tuple((shape,) for _, shape in shapes),
        (batch, inputs),
        (batch, outputs),
        0.001 * (position + 1),
    )


LAYERS = [dense(0, 100, 100), dense(1, 100, 100), dense(2, 100, 120), dense(3, 120, 100)]


def test_the_partitioner_cuts_consecutive_shards_within_the_limit():
    limit = shard_bytes(LAYERS[:2]) + 1
    shards = partition("m", LAYERS, limit, label_bytes=32)
    assert [(s.first, s.stop) for s in shards] == [(0, 2), (2, 3), (3, 4)]
    assert all(s.bytes <= limit for s in shards) and shards[-1].last
    assert shard_bytes(LAYERS[:3]) > limit  # greedy: the first shard could not take layer 2


def test_a_layer_that_cannot_fit_is_refused_by_name():
    with pytest.raises(MXKVError, match=r"model .m.: layer 2 \(Dense d2\) needs .* KiB"):
        partition("m", LAYERS, shard_bytes(LAYERS[2:3]) - 1, label_bytes=32)


def test_a_models_tasks_run_forward_then_loss_then_backward():
    task = ModelTask(None, None, [(np.zeros((8, 1)), None)] * 3, epochs=2)
    chain = ModelChain(0, task, partition("m", LAYERS, shard_bytes(LAYERS[:2]) + 1, 32))
    kinds = [(chain.step(n).kind, chain.step(n).shard) for n in range(5)]
    assert kinds == [("forward", 0), ("forward", 1), ("loss", 2), ("backward", 1), ("backward", 0)]
    assert chain.total == 2 * 3 * 5 and chain.step(5).batch == 1 and chain.step(15).epoch == 1
    assert chain.step(16).update == 3  # the 4th batch: 3 updates made before it
    assert chain.remaining_seconds(0) == pytest.approx(6 * chain.remaining_seconds(25))
    assert chain.remaining_seconds(chain.total) == 0


def test_the_device_budget_refuses_what_does_not_fit():
    budget = DeviceBudget(100, None)
    budget.reserve(60, "a")
    with pytest.raises(MXKVError, match=r"b needs .* of the device budget"):
        budget.reserve(50, "b")
    budget.release(60)
    budget.reserve(100, "c")
    assert budget.peak == 100


def test_unknown_schedules_and_budgets_are_refused():
    with pytest.raises(MXKVError, match="schedule 'random' is not one of lrtf, fifo"):
        ShardOrchestrator([object()], 1.0, schedule="random")
    with pytest.raises(MXKVError, match="device_memory_mb must be positive"):
        ShardOrchestrator([object()], 0)


def train(job_dir, budget_mb: float, *options: str) -> list:
    job = launch(
        RANKS,
        "shard_models.py",
        str(job_dir),
        "--models",
        str(MODELS),
        "--budget-mb",
        str(budget_mb),
        *options,
        timeout=150,
    )
    assert job.returncode == 0, job.output
    run_reference("shard_models.py", str(job_dir), "--models", str(MODELS), "--reference")
    reference = dict(np.load(job_dir / "reference.npz"))
    for rank, weights in enumerate(load_ranks(job_dir, RANKS)):
        assert weights.keys() == reference.keys()
        for name, value in weights.items():
            np.testing.assert_allclose(
                value,
                reference[name],
                rtol=1e-6,
                atol=1e-6,
                err_msg=f"rank {rank}: {name} differs from the model trained alone",
            )
    return [json.loads((job_dir / f"rank{r}.json").read_text()) for r in range(RANKS)]


def test_models_trained_together_end_where_each_alone_ends_within_the_budget(job_dir):
    """4 MLPs (SGD with momentum and Adam, different learning rates) on 2 ranks, a budget
    that cuts each into at least 3 shards: every weight matches the model trained alone,
    no rank ever held more than the budget, both ranks ran tasks."""
    reports = train(job_dir, 0.2)
    for report in reports:
        assert min(report["shards"].values()) >= 3, report["shards"]
        for device in report["devices"]:
            assert 0 < device["peak_bytes"] <= device["budget_bytes"] == int(0.2 * 2**20)
            assert device["tasks"] > 0
    tasks = sum(EPOCHS * BATCHES * (2 * shards - 1) for shards in reports[0]["shards"].values())
    assert sum(d["tasks"] for d in reports[0]["devices"]) == tasks


@pytest.mark.parametrize(
    "budget_mb, options",
    [
        (0.15, ("--schedule", "fifo", "--no-prefetch")),  # (shards may take the whole budget)
        (0.3, ("--schedule", "model-parallel")),
    ],
)
def test_the_other_schedules_train_the_same_models(job_dir, budget_mb, options):
    reports = train(job_dir, budget_mb, *options)
    assert min(reports[0]["shards"].values()) >= 2
    assert all(d["peak_bytes"] <= d["budget_bytes"] for d in reports[0]["devices"])


def test_ranks_that_describe_different_models_are_stopped_with_the_difference(job_dir):
    job = launch(RANKS, "shard_models.py", str(job_dir), "--mismatch", timeout=60)
    assert job.returncode != 0
    assert "rank 1 describes its models differently from rank 0 (model 2 differs" in job.output
    assert "every rank must build the same ModelTasks" in job.output

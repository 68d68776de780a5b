"""Shard parallelism (mxkv_hybrid.shard), in one process: the partitioner, the order of a
model's tasks, the device budget, and the schedules and budgets it refuses."""

import numpy as np
import pytest

from mxkv_hybrid.errors import MXKVError
from mxkv_hybrid.shard import ModelTask, ShardOrchestrator
from mxkv_hybrid.shard.device_budget import DeviceBudget
from mxkv_hybrid.shard.footprint import LayerFootprint, shard_bytes
from mxkv_hybrid.shard.model_chain import ModelChain
from mxkv_hybrid.shard.partition import partition


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

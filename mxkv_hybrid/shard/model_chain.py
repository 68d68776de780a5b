"""One model's tasks in order and what remains of them: per batch, forward of shards
0 .. S-2, the last shard's loss task (forward, loss, backward, update), then backward and
update of shards S-2 .. 0."""

from dataclasses import dataclass
from typing import List, Sequence

from .model_task import ModelTask
from .partition import Shard

BACKWARD_COST = 3  # a training task recomputes forward, then backward (about twice forward)


@dataclass(frozen=True)
class Step:
    """Task number `number` of model `model`."""

    model: int
    number: int
    epoch: int
    batch: int
    kind: str  # "forward", "loss" or "backward"
    shard: int
    update: int  # updates the model's optimizer made before this batch's


class ModelChain:
    def __init__(self, index: int, task: ModelTask, shards: Sequence[Shard]):
        self.index, self.task, self.shards = index, task, list(shards)
        last = len(shards) - 1
        self.kinds = (
            [("forward", s) for s in range(last)]
            + [("loss", last)]
            + [("backward", s) for s in reversed(range(last))]
        )
        self.batches = len(task.batches)
        self.total = task.epochs * self.batches * len(self.kinds)
        estimates = [
            shards[s].forward_seconds * (1 if kind == "forward" else BACKWARD_COST)
            for kind, s in self.kinds
        ]
        self._per_batch = sum(estimates)
        self._from: List[float] = [sum(estimates[i:]) for i in range(len(estimates))]

    def step(self, number: int) -> Step:
        batch_number, position = divmod(number, len(self.kinds))
        epoch, batch = divmod(batch_number, self.batches)
        kind, shard = self.kinds[position]
        return Step(self.index, number, epoch, batch, kind, shard, batch_number)

    def remaining_seconds(self, done: int) -> float:
        """Estimated compute of the tasks from number `done` on (the shards' measured
        forward times)."""
        if done >= self.total:
            return 0.0
        batch_number, position = divmod(done, len(self.kinds))
        later = self.task.epochs * self.batches - batch_number - 1
        return self._from[position] + later * self._per_batch

"""Uneven shards: every rank ends an epoch at the same step.

When the ranks' shards hold different numbers of batches, a rank that runs out
first would leave the others blocked in the next step's collective. Before each
batch the ranks agree, with one tiny MPI allreduce (MIN of "I have a batch"),
whether all of them still have one; the epoch ends on every rank at the first
step where one of them has none, like MXNet's ResizeIter (the longer shards'
leftover batches are skipped in that epoch and read again in the next).

Why not Horovod's join (a finished rank keeps answering the others' collectives
with zeros): the synchronous path here has no per-collective negotiation for a
joined rank to answer, and the averaging modes' collectives run on their own
schedule; stopping together keeps every reduction a plain sum of real gradients.

The agreement runs among the ranks whose steps are tied together: all ranks,
except in the modes async and asynchronous easgd, where only a group steps in
lockstep (the groups run independently of each other).
"""

import logging
from typing import Iterable, Iterator, TypeVar

import mxnet as mx

from ..comm.lockstep import all_agree
from ..comm.topology import world

log = logging.getLogger(__name__)
Batch = TypeVar("Batch")
_warned = False


def all_have_batch(has_batch: bool, batch_index: int) -> bool:
    """Collective: True when every rank stepping with this one has a batch."""
    agreed = all_agree(has_batch, "the uneven-shard agreement (even_batches)")
    if has_batch and not agreed:
        _warn_once(batch_index)
    return agreed


def _warn_once(batch_index: int) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            f"mxkv_hybrid: rank {world().rank} ends this epoch after {batch_index} "
            "batches with batches left: another rank's shard is shorter, and the ranks "
            "stop together (this rank's leftover batches are skipped this epoch; shown "
            "once)"
        )


def even_batches(batches: Iterable[Batch]) -> Iterator[Batch]:
    """Yields from `batches` while every rank still has a batch (collective per batch):
    `for data, label in mxkv_hybrid.even_batches(train_loader): ...`."""
    iterator = iter(batches)
    index = 0
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            all_have_batch(False, index)
            return
        if not all_have_batch(True, index):
            return
        index += 1
        yield batch


class EvenBatchesIter(mx.io.DataIter):
    """A DataIter whose epochs end on every rank at the same step (see the module doc).
    Module.fit wraps its train_data in one when the store is hybrid."""

    def __init__(self, inner: mx.io.DataIter):
        super().__init__(getattr(inner, "batch_size", 0))
        self.inner = inner
        self._index = 0
        self._ended = False

    @property
    def provide_data(self):
        return self.inner.provide_data

    @property
    def provide_label(self):
        return self.inner.provide_label

    def reset(self) -> None:
        self.inner.reset()
        self._index = 0
        self._ended = False

    def next(self) -> mx.io.DataBatch:
        if self._ended:  # every rank ended this epoch together: no need to agree again
            raise StopIteration
        try:
            batch = self.inner.next()
        except StopIteration:
            batch = None
        if not all_have_batch(batch is not None, self._index):
            self._ended = True
            raise StopIteration
        self._index += 1
        return batch

    def getpad(self) -> int:
        return self.inner.getpad()

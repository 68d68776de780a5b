"""Weights kept by the store on the workers (modes allreduce, easgd, lasgd; sync until the
servers take the optimizer).

Like MXNet's local store: `init` keeps rank 0's value; `push` combines the values of
all devices and ranks and, with an optimizer set, applies the update to the kept
weight (the same on every rank, since every rank gets the same combined gradient).
row_sparse values (init, push) take the sparse collective (comm/row_sparse.py); a kept
value is dense or row_sparse as it was given to init."""

from typing import Callable, Dict, Optional, Sequence

import mxnet as mx

from ..atomic_file import write_atomically
from ..comm import row_sparse
from ..comm.collectives import Arrays, Key, TensorCollectives
from ..errors import MXKVError

Share = Callable[[str, Sequence[Key], Sequence[Arrays]], None]


class WorkerWeights:
    def __init__(self, world: TensorCollectives, reduction, share: Optional[Share] = None):
        """reduction: what combines values in this mode (world collectives or GroupedSync);
        share: with separate group jobs, what makes a value the same in every group."""
        self._world = world
        self._reduction = reduction
        self._share = share
        self._weights: Dict[Key, mx.nd.NDArray] = {}
        self._reduced: Dict[Key, mx.nd.NDArray] = {}  # push buffers, used with an optimizer
        self.updater: Optional[mx.optimizer.Updater] = None

    def reduce_with(self, reduction) -> None:
        """Pushes are combined by `reduction` from now on (set_gradient_compression)."""
        self._reduction = reduction

    def holds(self, key: Key) -> bool:
        return key in self._weights

    def updates(self, key: Key) -> bool:
        """Whether a push of `key` is a gradient applied by the optimizer."""
        return self.updater is not None and key in self._weights

    @property
    def has_optimizer(self) -> bool:
        return self.updater is not None

    def set_optimizer(self, optimizer: mx.optimizer.Optimizer) -> None:
        self.updater = mx.optimizer.get_updater(optimizer)

    def init(
        self, op: str, keys: Sequence[Key], values: Sequence[Arrays], outs: Sequence[Arrays]
    ) -> None:
        """Keeps rank 0's values (and copies them into `outs`)."""
        sparse = [i for i, v in enumerate(values) if row_sparse.is_row_sparse(v[0])]
        for i in sparse:
            kept = row_sparse.broadcast(self._world, op, keys[i], values[i][0])
            if self._share is not None:  # the groups' rank 0s may differ: group 0's wins
                whole = kept.tostype("default")
                self._share(op, [keys[i]], [[whole]])
                kept = whole.tostype(row_sparse.ROW_SPARSE)
            self._weights[keys[i]] = kept
            for out in outs[i]:
                row_sparse.write_into(self._weights[keys[i]], out)
        keys, values, outs = row_sparse.dense_entries(sparse, keys, values, outs)
        if not keys:
            return
        for k, v in zip(keys, values):
            if k not in self._weights:
                self._weights[k] = mx.nd.empty(v[0].shape, ctx=v[0].context, dtype=v[0].dtype)
        kept = [[self._weights[k], *o] for k, o in zip(keys, outs)]
        self._world.broadcast(op, keys, values, kept)
        if self._share is not None:
            self._share(op, keys, kept)

    def push(
        self, op: str, keys: Sequence[Key], values: Sequence[Arrays], average: bool = False
    ) -> None:
        """Combines `values` over devices and ranks (summed, or averaged over ranks) into
        the kept values; with an optimizer, the combined value updates the weight."""
        sparse = [i for i, v in enumerate(values) if row_sparse.is_row_sparse(v[0])]
        for i in sparse:
            self._push_rows(op, keys[i], values[i], average)
        keys, values = row_sparse.dense_entries(sparse, keys, values)
        if not keys:
            return
        targets = [
            [self._reduced_buffer(k)] if self.updates(k) else [self._weights[k]] for k in keys
        ]
        self._reduction.allreduce(op, keys, values, targets, average)
        for k in keys:
            if self.updates(k) and self.updater is not None:  # (updates: there is one)
                self.updater(k, self._reduced[k], self._weights[k])

    def kept(self) -> Dict[Key, mx.nd.NDArray]:
        """The weights kept, by key (the same on every rank)."""
        return dict(self._weights)

    def pull(self, keys: Sequence[Key], outs: Sequence[Arrays], ignore_sparse: bool = True) -> None:
        """Copies the kept values into `outs`; row_sparse outs are left alone when
        `ignore_sparse` (as MXNet's stores do: row_sparse_pull is their pull)."""
        for k, targets in zip(keys, outs):
            for target in targets:
                if not (ignore_sparse and row_sparse.is_row_sparse(target)):
                    row_sparse.write_into(self._weights[k], target)

    def row_sparse_pull(
        self, keys: Sequence[Key], outs: Sequence[Arrays], row_ids: Sequence[Arrays]
    ) -> None:
        """outs = the rows `row_ids` of the kept values (row_sparse outs only)."""
        for k, targets, ids in zip(keys, outs, row_ids):
            for target, wanted in zip(targets, ids):
                row_sparse.rows_of(self._weights[k], wanted).copyto(target)

    def push_pull(
        self,
        op: str,
        keys: Sequence[Key],
        values: Sequence[Arrays],
        outs: Sequence[Arrays],
        average: bool = False,
    ) -> None:
        self.push(op, keys, values, average)
        self.pull(keys, outs)

    def save_optimizer_states(self, fname: str, dump_optimizer: bool) -> None:
        """Writes the optimizer state (identical on every rank) atomically to `fname`."""
        if self.updater is None:
            raise MXKVError("save_optimizer_states: no optimizer is set on this store")
        write_atomically(fname, self.updater.get_states(dump_optimizer))

    def load_optimizer_states(self, fname: str) -> None:
        if self.updater is None:
            raise MXKVError(
                "load_optimizer_states: no optimizer is set on this store; call set_optimizer first"
            )
        with open(fname, "rb") as f:
            self.updater.set_states(f.read())

    def close(self) -> None:
        self._weights.clear()
        self._reduced.clear()

    def _push_rows(self, op: str, key: Key, copies: Arrays, average: bool) -> None:
        """A row_sparse push: the rows combined by the mode's reduction (summed over devices
        and ranks; mode sync: through the servers) update the kept weight (with an
        optimizer: lazily, only those rows) or become the kept value."""
        summed = row_sparse.zeros_like(copies[0])
        self._reduction.allreduce(op, [key], [copies], [[summed]], average)
        kept = self._weights[key]
        if self.updates(key) and self.updater is not None:  # (updates: there is one)
            self.updater(key, summed, kept)
        elif row_sparse.is_row_sparse(kept):
            self._weights[key] = summed
        else:
            row_sparse.write_into(summed, kept)

    def _reduced_buffer(self, key: Key) -> mx.nd.NDArray:
        if key not in self._reduced:
            kept = self._weights[key]
            self._reduced[key] = mx.nd.empty(kept.shape, ctx=kept.context, dtype=kept.dtype)
        return self._reduced[key]

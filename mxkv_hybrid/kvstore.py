"""class Hybrid: the KVStore that MXNet sees (mx.kv.create('hybrid'))."""
import os
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import mxnet as mx
from mxnet.kvstore import KVStoreBase

from .collectives import Key, TensorCollectives
from .config import Config
from .errors import MXKVError
from .grouped_sync import GroupedSync
from .topology import groups, world



def _as_key_lists(key, value) -> Tuple[List[Key], List[List[mx.nd.NDArray]]]:
    """MXNet's calling conventions -> ([key, ...], [[array per device], ...])."""
    if isinstance(key, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise MXKVError(f"{len(key)} keys need a list of {len(key)} values")
        return list(key), [v if isinstance(v, (list, tuple)) else [v] for v in value]
    return [key], [value if isinstance(value, (list, tuple)) else [value]]


@KVStoreBase.register
class Hybrid(KVStoreBase):
    """Data-parallel KVStore over MPI ranks (see README.md for modes and knobs).

    Gradients are combined by fused tensor collectives; pushpull on many keys at once
    (which the Trainer and Module hooks of this package do) reduces them in buckets.
    With an optimizer set (update_on_kvstore), the store keeps a copy of each weight,
    applies the update once and copies the result out, like MXNet's local store.
    """

    def __init__(self):
        self._config = Config.from_environment()
        self._world = world()
        self._collectives: Optional[TensorCollectives] = TensorCollectives(
            self._world.comm, self._config.bucket_bytes)
        self._reducer = self._collectives  # mode allreduce: one world
        if self._config.mode == "sync":
            self._reducer = GroupedSync(self._config, self._world,
                                        groups(self._config.group_size))
        self._store: Dict[Key, mx.nd.NDArray] = {}
        self._reduced: Dict[Key, mx.nd.NDArray] = {}  # push buffers, used with an optimizer
        self._updater = None

    # ---- identity -------------------------------------------------------------------
    @property
    def type(self) -> str:
        """'hybrid': no 'dist' in it, so MXNet does not rescale what the store averages."""
        return "hybrid"

    @property
    def rank(self) -> int:
        return self._world.rank

    @property
    def num_workers(self) -> int:
        return self._world.size

    @property
    def local_rank(self) -> int:
        """Rank among the processes on this host (use it to pick a GPU)."""
        return self._world.local_rank

    @property
    def config(self) -> Config:
        return self._config

    @staticmethod
    def is_capable(capability: str) -> bool:
        return capability == KVStoreBase.OPTIMIZER

    # ---- data -----------------------------------------------------------------------
    def init(self, key, value) -> None:
        """Stores rank 0's value under each key (every rank gets the same)."""
        keys, values = _as_key_lists(key, value)
        for k in keys:
            if k in self._store:
                raise MXKVError(f"init: key {k!r} is already initialised")
        self._broadcast_into_store("init", keys, values, outs=[[] for _ in keys])

    def broadcast(self, key, value, out, priority: int = 0) -> None:
        """Copies rank 0's value into `out` on every rank (kept in the store too when an
        optimizer is set, since updates then run on the store)."""
        keys, values = _as_key_lists(key, value)
        _, outs = _as_key_lists(key, out)
        if self._updater is None:
            self._active().broadcast("broadcast", keys, values, outs)
        else:
            self._broadcast_into_store("broadcast", keys, values, outs)

    def push(self, key, value, priority: int = 0) -> None:
        """Combines the values of all devices and ranks into the store; with an optimizer,
        the combined value is the gradient that updates the stored weight."""
        keys, values = _as_key_lists(key, value)
        self._require_initialised("push", keys)
        self._reduce("push", keys, values, outs=None)

    def pull(self, key, out=None, priority: int = 0, ignore_sparse: bool = True) -> None:
        """Copies the stored value of each key into `out`."""
        keys, outs = _as_key_lists(key, out)
        self._require_initialised("pull", keys)
        self._copy_out(keys, outs)

    def pushpull(self, key, value, out=None, priority: int = 0) -> None:
        """out (default: value, in place) = the combined value, in one fused collective.

        With an optimizer set, keys that hold a weight (init/broadcast) are updated on the
        store and `out` receives the new weight; other keys (metrics, say) are only combined."""
        keys, values = _as_key_lists(key, value)
        outs = values if out is None else _as_key_lists(key, out)[1]
        updated = self._reduce("pushpull", keys, values, outs)
        self._copy_out([keys[i] for i in updated], [outs[i] for i in updated])

    def row_sparse_pull(self, key, out=None, priority: int = 0, row_ids=None) -> None:
        raise MXKVError("row_sparse_pull: sparse arrays are not supported by the hybrid kvstore; "
                        "use dense parameters or a native MXNet kvstore ('dist_sync')")

    def set_gradient_compression(self, compression_params) -> None:
        raise MXKVError("gradient compression is not supported by the hybrid kvstore; "
                        "remove compression_params from the Trainer/Module")

    def barrier(self) -> None:
        """Waits until every rank gets here."""
        self._world.comm.Barrier()

    # ---- optimizer on the store -------------------------------------------------------
    def set_optimizer(self, optimizer: mx.optimizer.Optimizer) -> None:
        """Updates run on the store from now on, with this optimizer object (shared, so a
        Trainer's later changes of learning rate or rescale_grad apply)."""
        self._updater = mx.optimizer.get_updater(optimizer)

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Writes the optimizer state (identical on every rank) atomically to `fname`."""
        if self._updater is None:
            raise MXKVError("save_optimizer_states: no optimizer is set on this store")
        directory = os.path.dirname(os.path.abspath(fname))
        with tempfile.NamedTemporaryFile("wb", dir=directory, delete=False,
                                         prefix=f".{os.path.basename(fname)}.") as tmp:
            tmp.write(self._updater.get_states(dump_optimizer))
        os.replace(tmp.name, fname)

    def load_optimizer_states(self, fname: str) -> None:
        if self._updater is None:
            raise MXKVError("load_optimizer_states: no optimizer is set on this store; "
                            "call set_optimizer first")
        with open(fname, "rb") as f:
            self._updater.set_states(f.read())

    def close(self) -> None:
        """Leaves the parameter server (sync mode) and frees the buffers; the store cannot
        be used afterwards."""
        if isinstance(self._reducer, GroupedSync):
            self._reducer.close()
        self._collectives = self._reducer = None
        self._store.clear()
        self._reduced.clear()

    # ---- helpers ----------------------------------------------------------------------
    def _active(self) -> TensorCollectives:
        """The collectives over all ranks (broadcasts)."""
        if self._collectives is None:
            raise MXKVError("this hybrid kvstore was closed; create a new one")
        return self._collectives

    def _reduction(self):
        """What combines values in this mode: the world collectives, or GroupedSync."""
        self._active()
        return self._reducer

    def _require_initialised(self, op: str, keys: Sequence[Key]) -> None:
        missing = [k for k in keys if k not in self._store]
        if missing:
            raise MXKVError(f"{op}: key(s) {missing!r} not initialised; call init first")

    def _updates_on_store(self, key: Key) -> bool:
        return self._updater is not None and key in self._store

    def _reduce(self, op: str, keys, values, outs) -> List[int]:
        """One fused allreduce of all keys. Weights under an optimizer are reduced into a push
        buffer and updated in the store; the others go to `outs` (push: to the store).
        Returns the positions of the updated keys."""
        updated = [i for i, k in enumerate(keys) if self._updates_on_store(k)]
        targets = [[self._reduced_buffer(k)] if self._updates_on_store(k)
                   else [self._store[k]] if outs is None else outs[i]
                   for i, k in enumerate(keys)]
        self._reduction().allreduce(op, keys, values, targets, self._config.average)
        for i in updated:
            self._updater(keys[i], self._reduced[keys[i]], self._store[keys[i]])
        return updated

    def _copy_out(self, keys, outs) -> None:
        for k, targets in zip(keys, outs):
            for target in targets:
                self._store[k].copyto(target)

    def _broadcast_into_store(self, op, keys, values, outs) -> None:
        for k, v in zip(keys, values):
            if k not in self._store:
                self._store[k] = mx.nd.empty(v[0].shape, ctx=v[0].context, dtype=v[0].dtype)
        self._active().broadcast(op, keys, values, [[self._store[k], *o] for k, o in zip(keys, outs)])

    def _reduced_buffer(self, key: Key) -> mx.nd.NDArray:
        if key not in self._reduced:
            stored = self._store[key]
            self._reduced[key] = mx.nd.empty(stored.shape, ctx=stored.context, dtype=stored.dtype)
        return self._reduced[key]

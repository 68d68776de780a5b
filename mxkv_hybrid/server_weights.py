"""MXKV_MODE=async: weights held by MXNet's dist_async servers, groups asynchronous.

Inside a group the step is synchronous: its ranks average their gradients with the
tensor-collective allreduce. The group leader pushes that gradient to the servers,
which apply the optimizer at once (no waiting for other groups), pulls the current
weights and broadcasts them in its group. Groups therefore run at their own pace and a
group's gradient may be computed on weights that other groups have since updated
(asynchronous SGD; how stale depends on the groups' relative speed)."""
import atexit
from typing import Optional, Sequence, Set

import mxnet as mx

from . import ps
from .collectives import Arrays, Key, TensorCollectives
from .config import Config
from .errors import MXKVError
from .topology import Groups, World, wait_for_leader


SERVER_SIDE_STATES = ("in MXKV_MODE=async the optimizer and its state live on the parameter "
                      "servers; they cannot be read, saved or loaded from a worker (save the "
                      "weights, or use MXKV_MODE=sync)")


class ServerWeights:
    def __init__(self, config: Config, world: World, groups: Groups,
                 world_collectives: TensorCollectives):
        self._world = world_collectives
        self._group_comm = groups.group_comm
        self._group = TensorCollectives(groups.group_comm, config.bucket_bytes)
        self._average = config.average
        self._keys: Set[Key] = set()
        self._optimizer_set = False
        self._ps = ps.connect_leader("dist_async", config, world, groups)
        if self._ps is not None:
            atexit.register(self.close)

    def holds(self, key: Key) -> bool:
        return key in self._keys

    def updates(self, key: Key) -> bool:
        return self._optimizer_set and key in self._keys

    @property
    def has_optimizer(self) -> bool:
        return self._optimizer_set

    @property
    def updater(self):
        raise MXKVError(SERVER_SIDE_STATES)

    def set_optimizer(self, optimizer: mx.optimizer.Optimizer) -> None:
        if self._ps is not None:
            self._ps.set_optimizer(optimizer)
        self._optimizer_set = True

    def init(self, op: str, keys: Sequence[Key], values: Sequence[Arrays],
             outs: Sequence[Arrays]) -> None:
        """Rank 0's values become the servers' weights (and are copied into `outs`)."""
        kept = [[mx.nd.empty(v[0].shape, ctx=v[0].context, dtype=v[0].dtype)] for v in values]
        self._world.broadcast(op, keys, values, [[*k, *o] for k, o in zip(kept, outs)])
        new = [i for i, k in enumerate(keys) if k not in self._keys]
        if self._ps is not None and new:
            self._ps.init([keys[i] for i in new], [kept[i][0] for i in new])
        self._keys.update(keys)

    def push(self, op: str, keys: Sequence[Key], values: Sequence[Arrays]) -> None:
        """Group average (or sum), then the leader's push: the servers apply it."""
        self.push_pull(op, keys, values, outs=None)

    def pull(self, keys: Sequence[Key], outs: Sequence[Arrays]) -> None:
        """The leader pulls the servers' current weights and broadcasts them in its group."""
        self.push_pull("pull", keys, values=None, outs=outs)

    def push_pull(self, op: str, keys: Sequence[Key], values: Optional[Sequence[Arrays]],
                  outs: Optional[Sequence[Arrays]]) -> None:
        """push and/or pull in one round trip of the leader to the servers."""
        if values is not None:
            self._group.allreduce(op, keys, values, values, self._average)
        if self._ps is not None:
            self._ps.push_pull(keys, [v[0] for v in values] if values is not None else [],
                               [o[0] for o in outs] if outs is not None else [])
        if outs is not None:
            wait_for_leader(self._group_comm, is_leader=self._ps is not None)
            self._group.broadcast(op, keys, outs, outs, root=0)

    def save_optimizer_states(self, fname: str, dump_optimizer: bool) -> None:
        raise MXKVError(SERVER_SIDE_STATES)

    def load_optimizer_states(self, fname: str) -> None:
        raise MXKVError(SERVER_SIDE_STATES)

    def close(self) -> None:
        """Releases this store's use of the parameter server (leaders); safe to call twice."""
        if self._ps is not None:
            self._ps = None
            ps.release()

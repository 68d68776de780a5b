"""MXKV_MODE=easgd: elastic averaging SGD between groups (Zhang, Choromanska, LeCun 2015).

Inside a group the step is synchronous SGD: the ranks average their gradients with the
tensor-collective allreduce and apply the same update. Every tau steps (after the warm-up
steps) the group's leader does the asynchronous elastic exchange with the centre variable
c, which MXNet's dist_async servers keep: it pulls c, computes e = alpha (x - c), moves
its weights x -= e and pushes e, which the servers add to c (ElasticCentre). The leader
then broadcasts x in its group. Each exchange conserves x + c: what the group gives up,
the centre receives.

With MXKV_EASGD_SYNC=1 the servers are dist_sync: every group exchanges at the same step,
each reads the same c (a push is held until all groups pushed) and the servers add the
sum of the groups' e: c += alpha sum_g (x_g - c), synchronous EASGD."""
import atexit
from dataclasses import replace
from typing import Dict, Sequence

import mxnet as mx

from . import ps
from .collectives import Arrays, Key, TensorCollectives
from .config import Config
from .server_keys import ServerKeys
from .server_optimizers import ElasticCentre
from .topology import Groups, World, wait_for_leader


class ElasticAveraging:
    """The elastic exchanges of one group; `group` also averages the group's gradients."""

    def __init__(self, config: Config, world: World, groups: Groups):
        self.alpha = config.easgd_alpha or config.easgd_beta / groups.num_groups
        self.tau = config.tau
        self.warmup_steps = config.warmup_steps
        self.steps = 0
        self.exchanges = 0
        self.group = TensorCollectives(groups.group_comm, replace(config, overlap=False))
        self._group_comm = groups.group_comm
        self._server_keys = ServerKeys()
        self._centre: Dict[Key, mx.nd.NDArray] = {}  # the leader's last read of c
        kind = "dist_sync" if config.easgd_sync else "dist_async"
        self._ps = ps.connect_leader(kind, config, world, groups)
        if self._ps is not None:
            self._ps.set_optimizer(ElasticCentre())
            atexit.register(self.close)

    def register(self, keys: Sequence[Key], weights: Sequence[mx.nd.NDArray]) -> None:
        """The centre of each new key starts at its weights (identical on every rank)."""
        new = [i for i, k in enumerate(keys) if k not in self._server_keys]
        for i in new:
            self._server_keys.add(keys[i])
        if self._ps is not None and new:
            # A CPU dist kvstore keeps the last array pushed under a key as its receive
            # buffer (no copy), so later pulls write into it: push copies, never the weights.
            for i in new:
                self._centre[keys[i]] = weights[i].copy()
            self._ps.init([self._server_keys[keys[i]] for i in new],
                          [self._centre[keys[i]] for i in new])

    def after_step(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> bool:
        """Counts an optimizer step; every tau-th one after the warm-up exchanges."""
        self.steps += 1
        if self.steps <= self.warmup_steps or (self.steps - self.warmup_steps) % self.tau:
            return False
        self.exchange(keys, weights)
        return True

    def exchange(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None:
        """One elastic exchange of this group's weights (every device's copy) with c."""
        if self._ps is not None:
            server_keys = [self._server_keys[k] for k in keys]
            centres = [self._centre[k] for k in keys]
            self._ps.push_pull(server_keys, [], centres)
            elastic = [self.alpha * (w[0] - c) for w, c in zip(weights, centres)]
            for w, e in zip(weights, elastic):
                w[0][:] = w[0] - e
            self._ps.push_pull(server_keys, elastic, [])
        wait_for_leader(self._group_comm, is_leader=self._ps is not None)
        self.group.broadcast("elastic exchange", keys, weights, weights, root=0)
        self.exchanges += 1

    def centre(self, keys: Sequence[Key], outs: Sequence[mx.nd.NDArray]) -> None:
        """Leaders: reads the centre variable into `outs` (for tests and checkpoints)."""
        if self._ps is not None:
            self._ps.push_pull([self._server_keys[k] for k in keys], [], list(outs))

    def close(self) -> None:
        if self._ps is not None:
            self._ps = None
            ps.release()

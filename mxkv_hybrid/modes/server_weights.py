"""MXKV_MODE=async: weights held by MXNet's dist_async servers, groups asynchronous.

Inside a group the step is synchronous: its ranks average their gradients with the
tensor-collective allreduce. The group leader pushes that gradient to the servers,
which apply the optimizer at once (no waiting for other groups), pulls the current
weights and broadcasts them in its group. Groups therefore run at their own pace and a
group's gradient may be computed on weights that other groups have since updated
(asynchronous SGD). That staleness is measured: the servers count the pushes they
apply (CountingOptimizer), and each leader reports, at close, how many updates of other
groups landed between its reading the weights and its gradient being applied."""
import atexit
from dataclasses import replace
import sys
from typing import List, Optional, Sequence

import mxnet as mx
import numpy as np

from ..comm.collectives import Arrays, Key, TensorCollectives
from ..comm.topology import Groups, World, wait_for_leader
from ..config import Config
from ..errors import MXKVError
from ..ps.client import connect_leader, release
from ..ps.finish_line import finish_line_for
from ..ps.keys import ServerKeys
from ..ps.optimizers import COUNTER_KEY, FINISH_KEY, CountingOptimizer


SERVER_SIDE_STATES = ("in MXKV_MODE=async the optimizer and its state live on the parameter "
                      "servers; they cannot be read, saved or loaded from a worker (save the "
                      "weights, or use MXKV_MODE=sync)")


class ServerWeights:
    def __init__(self, config: Config, world: World, groups: Groups,
                 world_collectives: TensorCollectives):
        self._world = world_collectives
        self._group_comm = groups.group_comm
        self._group = TensorCollectives(groups.group_comm, replace(config, overlap=False))
        self._average = config.average
        self._server_keys = ServerKeys()
        self._optimizer_set = False
        self._who = f"group {groups.group_index} (leader rank {world.rank})"
        self._counter = mx.nd.zeros((1,))
        self._one = mx.nd.ones((1,))
        self._count_at_pull = 0.0
        self._pushes_since_pull = 0
        self.staleness: List[int] = []  # per applied gradient (leaders only)
        self._separate_jobs = not world.spans_all_ranks  # each group its own MPI job
        # separate group jobs: steps this group took before this start (None: not known
        # until the first weights are kept)
        self.steps_done = None if self._separate_jobs else 0
        self._ps = connect_leader("dist_async", config, world, groups)
        self._finish = finish_line_for(self._ps, self._separate_jobs,
                                       groups.group_index, groups.num_groups, config.ps_timeout,
                                       config.attempt)
        if self._ps is not None:
            atexit.register(self.close)

    def holds(self, key: Key) -> bool:
        return key in self._server_keys

    def updates(self, key: Key) -> bool:
        return self._optimizer_set and key in self._server_keys

    @property
    def has_optimizer(self) -> bool:
        return self._optimizer_set

    @property
    def updater(self):
        raise MXKVError(SERVER_SIDE_STATES)

    def set_optimizer(self, optimizer: mx.optimizer.Optimizer) -> None:
        if not self._optimizer_set:  # the first time: the push counter's key
            self._server_keys.claim(COUNTER_KEY, "the servers' optimizer (its push counter)")
            if self._ps is not None:
                self._ps.init([COUNTER_KEY], [mx.nd.zeros((1,))])
        if self._ps is not None:
            self._ps.set_optimizer(CountingOptimizer(optimizer))
        self._optimizer_set = True

    def init(self, op: str, keys: Sequence[Key], values: Sequence[Arrays],
             outs: Sequence[Arrays]) -> None:
        """Rank 0's values become the servers' weights (and are copied into `outs`). Separate
        group jobs: each group's rank 0 offers its values, and every group then takes the
        weights the servers kept (one leader's)."""
        kept = [[mx.nd.empty(v[0].shape, ctx=v[0].context, dtype=v[0].dtype)] for v in values]
        self._world.broadcast(op, keys, values, [[*k, *o] for k, o in zip(kept, outs)])
        new = [i for i, k in enumerate(keys) if k not in self._server_keys]
        for i in new:
            self._server_keys.add(keys[i])
        done = 0
        if self._ps is not None and new:
            server_keys = [self._server_keys[keys[i]] for i in new]
            self._ps.init(server_keys, [kept[i][0] for i in new])
            if self._separate_jobs:
                self._ps.push_pull(server_keys, [], [kept[i][0] for i in new])
                done = self._finish.rejoined("the servers' weights", [kept[i][0] for i in new])
        if self._separate_jobs and new:
            wait_for_leader(self._group_comm, is_leader=self._ps is not None)
            self._group.broadcast(op, [keys[i] for i in new], [kept[i] for i in new],
                                  [[*kept[i], *outs[i]] for i in new], root=0)
            if self.steps_done is None:
                self.steps_done = self._group_comm.bcast(done, root=0)

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
            server_keys = [self._server_keys[k] for k in keys]
            pushed = [v[0] for v in values] if values is not None else []
            pulled = [o[0] for o in outs] if outs is not None else []
            if self._optimizer_set:  # the servers count pushes on COUNTER_KEY (staleness)
                server_keys.append(COUNTER_KEY)
                pushed += [self._one] if values is not None else []
                pulled += [self._counter] if outs is not None else []
                if self._finish is not None and values is not None:  # a key pushes and pulls
                    server_keys.append(FINISH_KEY)
                    pushed.append(self._finish.progress())
                    pulled += [self._finish.progress()] if outs is not None else []
            self._ps.push_pull(server_keys, pushed, pulled)
            self._count_staleness(values is not None, outs is not None)
        if outs is not None:
            wait_for_leader(self._group_comm, is_leader=self._ps is not None)
            self._group.broadcast(op, keys, outs, outs, root=0)

    def consensus(self, keys: Sequence[Key], outs: Sequence[Arrays]) -> None:
        """Collective: `outs` become the servers' weights once every group's last update
        landed (a barrier over all ranks; separate group jobs: over the group, then the
        leaders' finish line, which does not wait for a lost group)."""
        wait_for_leader(self._world.comm, is_leader=False)
        if self._finish is not None and self._optimizer_set:  # else no group pushed anything
            self._finish.cross()
        self.pull(keys, outs)

    def _count_staleness(self, pushed: bool, pulled: bool) -> None:
        """Updates applied between this leader's last two pulls, less its own pushes: the
        other groups' updates its gradient did not see (an upper estimate: updates landing
        between its push and its pull count too)."""
        if not self._optimizer_set:
            return
        self._pushes_since_pull += int(pushed)
        if pulled:
            now = float(self._counter.asscalar())
            if self._pushes_since_pull:
                self.staleness.append(int(now - self._count_at_pull - self._pushes_since_pull))
            self._count_at_pull, self._pushes_since_pull = now, 0

    def report(self) -> str:
        """One line about the staleness measured by this leader ('' elsewhere)."""
        if not self.staleness:
            return ""
        values = np.array(self.staleness)
        return (f"mxkv_hybrid: {self._who}: {len(values)} asynchronous updates; staleness "
                f"(updates by other groups between reading the weights and applying the "
                f"gradient) mean {values.mean():.2f}, median {np.median(values):.0f}, "
                f"max {values.max()}")

    def save_optimizer_states(self, fname: str, dump_optimizer: bool) -> None:
        raise MXKVError(SERVER_SIDE_STATES)

    def load_optimizer_states(self, fname: str) -> None:
        raise MXKVError(SERVER_SIDE_STATES)

    def close(self) -> None:
        """Releases this store's use of the parameter server (leaders); safe to call twice."""
        if self._ps is not None:
            line = self.report()
            if line:
                print(line, file=sys.stderr, flush=True)
            self._ps = None
            release()

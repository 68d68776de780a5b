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
sum of the groups' e: c += alpha sum_g (x_g - c), synchronous EASGD.

With MXKV_TRANSPORT=rma the centre lives in MPI windows on the group leaders instead
(remote_centre.py): the leader reads c with one-sided gets and adds e with one-sided
accumulates; synchronous EASGD puts a barrier of the leaders between the reads and the
adds, and after the adds.

With MXKV_OUTER each leader sends the centre an outer optimizer's move instead of e
(outer_optimizer.py): c += lr (e + mu m) with m = mu m + e, the leader's momentum.

EAMSGD (the paper's momentum variant) is this mode with a Nesterov-momentum optimizer
('nag'): the elastic step moves x and leaves the momentum alone, as in the paper."""

import atexit
from dataclasses import replace
from typing import Dict, List, Sequence

import mxnet as mx

from ..comm import timeline
from ..comm.collectives import Arrays, Key, TensorCollectives
from ..comm.compression import QuantisedReducer
from ..comm.compression_params import Compression
from ..comm.kernels import elastic_step
from ..comm.link_throttle import link_throttle
from ..comm.topology import Groups, World, wait_for_leader
from ..config import Config
from ..errors import MXKVError
from ..ps.client import connect_leader, release
from ..ps.finish_line import finish_line_for
from ..ps.keys import ServerKeys
from ..ps.optimizers import FINISH_KEY, ElasticCentre
from .averaging import Reducer, allreduce_split, check_saved_with, check_state_mode
from .elastic_rate import elastic_alpha
from .local_lr_scale import ELASTIC_RULE_PERIOD, local_lr_scale, scaled
from .outer_optimizer import outer_optimizer_of
from .remote_centre import RemoteCentre


class ElasticAveraging:
    """The elastic exchanges of one group, and the store's reducer in mode easgd."""

    def __init__(self, config: Config, world: World, groups: Groups):
        self.alpha = elastic_alpha(
            config.easgd_alpha,
            config.easgd_beta,
            groups.num_groups,
            config.tau,
            config.easgd_sync,
            world.rank == 0,
        )
        self._local_scale = local_lr_scale(
            config.local_lr_scale,
            config.tau,
            groups.num_groups,
            world.rank == 0,
            "groups",
            ELASTIC_RULE_PERIOD,
        )
        self.tau = config.tau
        self.warmup_steps = config.warmup_steps
        self.steps = 0
        self.rounds = 0  # elastic exchanges
        # separate group jobs: steps this group took before this start (None: not known
        # until the first weights are registered), and the steps its leader reported
        self.steps_done = None if not world.spans_all_ranks else 0
        self._steps_reported = 0
        self._sync = config.easgd_sync
        self._world_comm = world.comm
        blocking = replace(config, overlap=False)
        self.group = TensorCollectives(groups.group_comm, blocking)
        self.gradients: Reducer = scaled(self.group, self._local_scale)  # weights' gradients
        self._world = TensorCollectives(world.comm, blocking, groups)
        self._group_comm = groups.group_comm
        self._server_keys = ServerKeys()
        self._centre: Dict[Key, mx.nd.NDArray] = {}  # the leader's last read of c
        self._elastic: Dict[Key, mx.nd.NDArray] = {}  # the leader's last e
        self._separate_jobs = not world.spans_all_ranks  # each group its own MPI job
        self._rejoins = config.rejoin
        self._rank = world.rank  # in the whole job
        self._leads = groups.is_leader  # the group's leader exchanges with the centre
        self._remote = (
            RemoteCentre(world, groups, link_throttle(config), config.rma_progress_us)
            if config.transport == "rma"
            else None
        )
        self._outer = (
            outer_optimizer_of(config, announce=world.rank == 0) if config.outer != "none" else None
        )  # the leader's moves of c
        self._ps = None
        if self._remote is None:
            kind = "dist_sync" if config.easgd_sync else "dist_async"
            self._ps = connect_leader(kind, config, world, groups)
            if self._ps is not None:
                self._ps.set_optimizer(ElasticCentre())
        if self._leads:
            atexit.register(self.close)
        self._finish = finish_line_for(
            self._ps,
            self._separate_jobs,
            groups.group_index,
            groups.num_groups,
            config.ps_timeout,
            config.attempt if config.rejoin else 0,
        )

    def allreduce(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
    ) -> None:
        """The store's reducer in mode easgd: gradients of weights inside the group (times
        MXKV_LOCAL_LR_SCALE), other values (metrics) over all ranks."""
        allreduce_split(
            op,
            keys,
            inputs,
            outputs,
            average,
            self._server_keys.__contains__,
            weights=self.gradients,
            others=self._world,
        )

    def compress_gradients(self, compression: Compression) -> None:
        """set_gradient_compression: the weights' gradients are quantised (each rank's, with
        its residual) before the group sums them; the elastic exchange stays float32."""
        self.gradients = scaled(QuantisedReducer(self.group, compression), self._local_scale)

    def register(self, keys: Sequence[Key], weights: Sequence[mx.nd.NDArray]) -> None:
        """The centre of each new key starts at its weights (identical on every rank of a
        group, and of all groups in one MPI job). Separate group jobs may start from
        different weights: each then starts from the centre the servers kept (one
        leader's weights)."""
        new = [i for i, k in enumerate(keys) if k not in self._server_keys]
        for i in new:
            self._server_keys.add(keys[i])
        done = 0
        if self._leads and new:
            # A CPU dist kvstore keeps the last array pushed under a key as its receive
            # buffer (no copy), so later pulls write into it: push copies, never the weights.
            for i in new:
                self._centre[keys[i]] = weights[i].copy()
                self._elastic[keys[i]] = mx.nd.zeros_like(weights[i])
        if self._remote is not None and self._leads and new:
            self._remote.create([keys[i] for i in new], [self._centre[keys[i]] for i in new])
        elif self._ps is not None and new:
            server_keys = [self._server_keys[keys[i]] for i in new]
            self._ps.init(server_keys, [self._centre[keys[i]] for i in new])
            if self._separate_jobs:
                self._ps.push_pull(server_keys, [], [weights[i] for i in new])
                assert self._finish is not None  # (separate group jobs have one)
                done = self._finish.rejoined("the centre", [weights[i] for i in new])
        if self._separate_jobs and new:
            wait_for_leader(self._group_comm, is_leader=self._ps is not None)
            started = [[weights[i]] for i in new]
            self.group.broadcast(
                "the centre's first value", [keys[i] for i in new], started, started, root=0
            )
            if self.steps_done is None:  # a restarted group goes on from its recorded step
                self.steps_done = self._group_comm.bcast(done, root=0)
                self.steps = self._steps_reported = self.steps_done

    def after_step(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> bool:
        """Counts an optimizer step; every tau-th one after the warm-up exchanges."""
        self.steps += 1
        if self.steps <= self.warmup_steps or (self.steps - self.warmup_steps) % self.tau:
            return False
        self.exchange(keys, weights)
        return True

    def exchange(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None:
        """One elastic exchange of this group's weights (every device's copy) with c."""
        centres = [self._centre[k] for k in keys] if self._leads else []

        def elastic_of(batch: List[int]) -> List[mx.nd.NDArray]:  # a batch just read
            return self._elastic_step(
                [keys[i] for i in batch],
                [weights[i] for i in batch],
                [centres[i] for i in batch],
                ready=True,
            )

        with timeline.span("elastic exchange", "averaging", round=self.rounds + 1):
            if self._remote is not None and self._leads and self._sync:
                self._remote.read(keys, centres)
                self._remote.barrier()  # every group reads c before any group moves it
                self._remote.add(keys, self._elastic_step(keys, weights, centres))
                self._remote.barrier()  # every group's difference is in c before the next read
            elif self._remote is not None and self._leads:
                self._remote.read_then_add(keys, centres, elastic_of)
            elif self._ps is not None:
                self._ps.pull_then_push([self._server_keys[k] for k in keys], centres, elastic_of)
                if self._finish is not None:
                    self._ps.push_pull(
                        [FINISH_KEY], [self._finish.progress(self.steps - self._steps_reported)], []
                    )
                    self._steps_reported = self.steps
            wait_for_leader(self._group_comm, is_leader=self._leads)
            self.group.broadcast("elastic exchange", keys, weights, weights, root=0)
        self.rounds += 1

    def _elastic_step(
        self,
        keys: Sequence[Key],
        weights: Sequence[Arrays],
        centres: Sequence[mx.nd.NDArray],
        ready: bool = False,
    ) -> List[mx.nd.NDArray]:
        """e = alpha (x - c) per key; x -= e (the leader's copy); returns e, computed in
        buffers kept per key (fresh arrays cost a page fault per 4 KiB every exchange).
        `ready`: no operation is pending on these arrays (kernels.elastic_step)."""
        elastic = [self._elastic[k] for k in keys]
        elastic_step(self.alpha, [w[0] for w in weights], centres, elastic, ready)
        if self._outer is not None:  # what the centre receives: the outer step's move
            self._outer.scale_moves(keys, elastic)
            for move in elastic:  # one-sided adds read them in place
                move.wait_to_read()
        return elastic

    def centre(self, keys: Sequence[Key], outs: Sequence[mx.nd.NDArray]) -> None:
        """Leaders: reads the centre variable into `outs` (for tests and checkpoints)."""
        if self._remote is not None and self._leads:
            self._remote.read(keys, list(outs))
        elif self._ps is not None:
            self._ps.push_pull([self._server_keys[k] for k in keys], [], list(outs))

    def consensus(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None:
        """Every rank's weights become the centre (the model EASGD delivers), once all
        groups are done (a barrier over all ranks first; separate group jobs: over the
        group, then the leaders' finish line, which does not wait for a lost group)."""
        wait_for_leader(self._world_comm, is_leader=False)
        if self._finish is not None:
            self._finish.cross()
        if self._leads:
            self.centre(keys, [w[0] for w in weights])
        wait_for_leader(self._group_comm, is_leader=self._leads)
        self.group.broadcast("consensus", keys, weights, weights, root=0)

    def state(self) -> dict:
        """The step counters and, on group leaders, the centre variable."""
        centre = None
        if self._leads:
            keys = list(self._centre)
            self.centre(keys, [self._centre[k] for k in keys])
            centre = {k: self._centre[k].asnumpy() for k in keys}
        return {
            "mode": "easgd",
            "steps": self.steps,
            "rounds": self.rounds,
            "centre": centre,
            "outer": None if self._outer is None else self._outer.state(),
        }

    def load_state(self, state: dict) -> None:
        """Restores the counters; world rank 0 sets the centre (on the servers, or in the
        leaders' windows) to the saved one (collective: every rank calls it, after the
        parameters are initialised).
        Separate group jobs: the group's own counters; the centre is set back (by group 0's
        leader, no other group waits for it) only in a job started afresh, since the servers
        of a restarted group kept the centre the other groups moved on."""
        check_state_mode(state, "easgd")
        self.steps, self.rounds = state["steps"], state["rounds"]
        check_saved_with(
            state, "outer", self._outer is not None, "easgd", "an outer optimizer (MXKV_OUTER)"
        )
        if self._outer is not None:
            self._outer.load_state(state["outer"])
        if self._leads:
            keys = list(self._centre)
            restores = self._rank == 0 and not (self._separate_jobs and self._rejoins)
            saved = state["centre"] if restores else None
            if restores and (saved is None or set(saved) != set(keys)):
                raise MXKVError(
                    "easgd: the saved centre variable does not cover this model's "
                    f"parameters {keys!r}: load the state that world rank 0 saved, "
                    "after the parameters are initialised"
                )
            if self._remote is not None:  # one-sided: the restoring leader writes it
                if saved is not None:
                    self._remote.write(
                        keys, [mx.nd.array(saved[k], dtype=self._centre[k].dtype) for k in keys]
                    )
            else:
                self._restore_on_servers(keys, saved)
        wait_for_leader(self._world_comm, is_leader=False)

    def _restore_on_servers(self, keys: Sequence[Key], saved) -> None:
        """Leaders: the servers' centre becomes `saved` (None: this leader adds nothing)."""
        current = [self._centre[k] for k in keys]
        self.centre(keys, current)
        if saved is not None:  # push saved - current: the servers add it to the centre
            moves = [mx.nd.array(saved[k], dtype=c.dtype) - c for k, c in zip(keys, current)]
        else:  # dist_sync sums one push from every leader: the others add nothing
            moves = [mx.nd.zeros(c.shape, dtype=c.dtype) for c in current]
        if saved is not None or self._sync:
            assert self._ps is not None  # (a leader's)
            self._ps.push_pull([self._server_keys[k] for k in keys], moves, [])

    def close(self) -> None:
        """Leaders: leaves the parameter server, or frees the centre's windows (collective
        over the leaders); safe to call twice."""
        if self._ps is not None:
            self._ps = None
            release()
        if self._remote is not None and self._leads:
            self._remote.close()
            self._remote = None

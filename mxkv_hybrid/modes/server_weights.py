"""Weights held by MXNet's parameter servers, which run the optimizer (modes sync, async).

Inside a group the step is synchronous: its ranks combine their gradients with the
tensor-collective allreduce. The group leader pushes that gradient to the servers, pulls
the updated weights and broadcasts them in its group.

MXKV_MODE=sync (dist_sync servers), as MXNet's dist_sync with update_on_kvstore: the
servers wait for every group's gradient, update once with their sum, and every group
pulls the same weights. The leaders push group sums; for the hooks' gradients the
servers' optimizer divides them by the number of ranks (MXKV_AVERAGE=1).

MXKV_MODE=async (dist_async servers): the servers apply each group's gradient at once
(no waiting for other groups), so groups run at their own pace and a group's gradient may
be computed on weights that other groups have since updated (asynchronous SGD). That
staleness is measured: the servers count the pushes they apply (ServerOptimizer), and
each leader reports, at close, how many updates of other groups landed between its
reading the weights and its gradient being applied.

In both the servers' optimizer is a pickled copy of the worker's: a changed learning rate
(Trainer.set_learning_rate) or rescale_grad (Trainer.step with another batch size) is
sent to them before the next gradient.

row_sparse: a key initialised with a row_sparse value is kept row_sparse by the servers
(every row, as MXNet's dist stores keep it); its gradients cross as rows (the union of
the group's rows, summed by the sparse collective), its optimizer updates only those
rows, and row_sparse_pull fetches only the rows the group's ranks ask for. A dense weight
with row_sparse gradients (Embedding(sparse_grad=True)) is kept row_sparse too, once the
store is told (expect_row_sparse_gradients; the Trainer hook does it): its gradients
cross as rows and update only those rows, as MXNet's local store does, and a pull into
the dense weight fetches every row."""

import atexit
import logging
import os
from dataclasses import replace
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence, Set, Tuple

import mxnet as mx
import numpy as np

from ..atomic_file import write_atomically
from ..capabilities import capabilities_of
from ..comm import row_sparse
from ..comm.collectives import Arrays, Key, TensorCollectives
from ..comm.compression_params import Compression
from ..comm.topology import Groups, World, wait_for_leader
from ..config import Config
from ..errors import MXKVError
from ..logs import TO_STDERR
from ..ps.by_value import dumps_for_servers
from ..ps.client import ParameterServer, connect_leader, release
from ..ps.coded_gradients import CodeDecoder, GradientCoder
from ..ps.finish_line import finish_line_for
from ..ps.keys import ServerKeys
from ..ps.layout import bigarray_bound
from ..ps.optimizers import COUNTER_KEY, FINISH_KEY, SETTINGS_KEYS, ServerOptimizer
from ..ps.server_states import command, server_file
from .async_momentum import has_momentum, with_async_momentum, with_kept_rate
from .worker_weights import Share

log = logging.getLogger(__name__)


class ServerWeights:
    def __init__(
        self,
        config: Config,
        world: World,
        groups: Groups,
        world_collectives: TensorCollectives,
        share: Optional[Share] = None,
    ):
        """config.mode 'sync' (dist_sync servers; the store creates this when the optimizer
        is set) or 'async' (dist_async servers). share: sync as separate group jobs, what
        makes a new key's value group 0's before the servers keep it (else the servers keep
        whichever leader's ps-lite numbers worker 0)."""
        self._share = share
        self._mode = config.mode
        self._asynchronous = config.mode == "async"
        self._world = world_collectives
        self._group_comm = groups.group_comm
        self._group = TensorCollectives(groups.group_comm, replace(config, overlap=False))
        self._world_size = world.size
        self._optimizer: Optional[mx.optimizer.Optimizer] = None
        self._sent_settings: Optional[Tuple[float, float]] = None  # (lr, rescale_grad) there
        self._sends_settings = self._asynchronous or groups.group_index == 0  # sync: others push 0
        self._server_keys = ServerKeys()
        self._rows: Set[Key] = set()  # the keys the servers keep row_sparse
        self._sparse_gradients: Set[Key] = set()  # keys to keep row_sparse when initialised
        self._dense_float32: Dict[int, Tuple[int, ...]] = {}  # server key: shape
        self._coder: Optional[GradientCoder] = None  # async with compression, leaders
        self._who = f"group {groups.group_index} (leader rank {world.rank})"
        self._counter = mx.nd.zeros((1,))
        self._one = mx.nd.ones((1,))
        self._count_at_pull = 0.0
        self._pushes_since_pull = 0
        self.staleness: List[int] = []  # per applied gradient (leaders only)
        # MXKV_ASYNC_DAMPING in the modes that damp (async), else none: staleness damps
        # each push, momentum and auto lower the servers' momentum
        damps = capabilities_of(config.mode).async_damping
        self._damping = config.async_damping if damps else "none"
        self._group_index, self._groups = groups.group_index, groups.num_groups
        self.damped: List[int] = []  # MXKV_ASYNC_DAMPING=staleness: s of each push damped
        self._push_scale = 1.0  # MXKV_ASYNC_DAMPING=rate past 1 / (1 - m) groups: < 1
        self._separate_jobs = not world.spans_all_ranks  # each group its own MPI job
        restartable = self._separate_jobs and self._asynchronous  # a group rejoins alone
        # separate async group jobs: steps this group took before this start (None: not
        # known until the first weights are kept)
        self.steps_done = None if restartable else 0
        self._ps = connect_leader(
            "dist_async" if self._asynchronous else "dist_sync", config, world, groups
        )
        # leaders: one key on each server for the optimizer's settings
        self._settings_keys = list(SETTINGS_KEYS[: self._ps.num_servers]) if self._ps else []
        self._finish = finish_line_for(
            self._ps,
            restartable,
            groups.group_index,
            groups.num_groups,
            config.ps_timeout,
            config.attempt if config.rejoin else 0,
        )
        if self._ps is not None:
            atexit.register(self.close)

    def holds(self, key: Key) -> bool:
        return key in self._server_keys

    def updates(self, key: Key) -> bool:
        return self._optimizer is not None and key in self._server_keys

    @property
    def has_optimizer(self) -> bool:
        return self._optimizer is not None

    @property
    def updater(self) -> SimpleNamespace:
        """What Trainer.load_states reads after the states were loaded: the optimizer
        (the servers run their own copy)."""
        return SimpleNamespace(optimizer=self._optimizer)

    def compress_gradients(self, compression: Compression) -> None:
        """Mode async: each group's gradients of the dense float32 weights cross as codes
        (ps/coded_gradients.py), from the servers' optimizer on."""
        if self._optimizer is not None:
            raise MXKVError(
                "set_gradient_compression: the parameter servers already run this "
                "store's optimizer without it; call set_gradient_compression "
                "before set_optimizer (gluon.Trainer and Module do)"
            )
        if self._ps is not None:
            self._coder = GradientCoder(compression)
            self._add_codes(list(self._dense_float32))

    def set_optimizer(self, optimizer: mx.optimizer.Optimizer) -> None:
        dumps_for_servers(optimizer)  # on every rank: what cannot be sent is refused on each
        if self._optimizer is None:  # the first time: the keys of the counter and settings
            self._server_keys.claim(COUNTER_KEY, "the servers' optimizer (its push counter)")
            for key in self._settings_keys:
                self._server_keys.claim(key, "the servers' optimizer (its settings)")
            if self._ps is not None:
                self._ps.init(
                    [COUNTER_KEY, *self._settings_keys],
                    [mx.nd.zeros((1,))]
                    + [mx.nd.zeros((2,), dtype="float64") for _ in self._settings_keys],
                )
        if self._ps is not None:
            decoder = None if self._coder is None else CodeDecoder(self._coder.compression)
            self._ps.set_optimizer(ServerOptimizer(self._for_the_servers(optimizer), decoder))
        self._optimizer = optimizer
        self._sent_settings = None
        if self._coder is not None:  # the servers' new optimizer learns the coded parts
            self._register_codes(list(self._coder.parts))

    def _for_the_servers(self, optimizer: mx.optimizer.Optimizer) -> mx.optimizer.Optimizer:
        """The optimizer the servers run: the script's, or with MXKV_ASYNC_DAMPING=rate
        (auto, the default: where the optimizer has a momentum above 0) or momentum a
        copy with the servers' momentum for the groups' asynchrony (async_momentum.py;
        rate also sets the scale of each push). Group 0 says which."""
        says = self._group_index == 0
        if self._damping == "auto" and not (has_momentum(optimizer) and optimizer.momentum > 0):
            if says:
                log.info(
                    f"mxkv_hybrid: MXKV_ASYNC_DAMPING=auto: {type(optimizer).__name__} has no "
                    "momentum to lower, so the groups' gradients are applied undamped, as "
                    "dist_async applies them (set MXKV_ASYNC_DAMPING=rate to scale each push "
                    "by 1 / groups, or staleness)",
                    extra=TO_STDERR,
                )
            return optimizer
        if self._damping in ("rate", "auto"):
            adjusted, self._push_scale, line = with_kept_rate(optimizer, self._groups)
        elif self._damping == "momentum":
            adjusted, line = with_async_momentum(optimizer, self._groups)
        else:
            return optimizer
        if says:
            log.info(f"mxkv_hybrid: MXKV_ASYNC_DAMPING={self._damping}: {line}", extra=TO_STDERR)
        return adjusted

    @property
    def _server(self) -> ParameterServer:
        """The parameter server, in what only a group's leader runs (it connects)."""
        assert self._ps is not None
        return self._ps

    @property
    def _codes(self) -> GradientCoder:
        """The leader's coder, once async compression is set."""
        assert self._coder is not None
        return self._coder

    def _add_codes(self, numbers: Sequence[int]) -> None:
        """A leader's code keys for the weights `numbers` that are dense float32, created
        on the servers (an init: every leader at once)."""
        shapes = {n: self._dense_float32[n] for n in numbers if n in self._dense_float32}
        parts = self._codes.add(shapes, self._server.num_servers, bigarray_bound())
        for part in parts:
            self._server_keys.claim(part.code_key, f"the codes of key {part.weight}")
        if parts:
            self._server.init([p.code_key for p in parts], [mx.nd.zeros((p.words,)) for p in parts])

    def _register_codes(self, numbers: Sequence[int]) -> None:
        """Tells the servers which parts the code keys of weights `numbers` update."""
        coded = [n for n in numbers if n in self._codes.parts]
        if coded:
            self._server.push_pull(coded, [self._codes.registration(n) for n in coded], [])

    def init(
        self, op: str, keys: Sequence[Key], values: Sequence[Arrays], outs: Sequence[Arrays]
    ) -> None:
        """Rank 0's values become the servers' weights (and are copied into `outs`). Separate
        group jobs: each group's rank 0 offers its values, and every group then takes the
        weights the servers kept (one leader's)."""
        sparse = [
            i
            for i, (k, v) in enumerate(zip(keys, values))
            if row_sparse.is_row_sparse(v[0]) or k in self._sparse_gradients
        ]
        for i in sparse:
            self._init_rows(op, keys[i], values[i][0], outs[i])
        keys, values, outs = row_sparse.dense_entries(sparse, keys, values, outs)
        if not keys:
            return
        kept = [[mx.nd.empty(v[0].shape, ctx=v[0].context, dtype=v[0].dtype)] for v in values]
        self._world.broadcast(op, keys, values, [[*k, *o] for k, o in zip(kept, outs)])
        new = [i for i, k in enumerate(keys) if k not in self._server_keys]
        if self._share is not None and new:
            self._share(op, [keys[i] for i in new], [kept[i] for i in new])
        for i in new:
            number = self._server_keys.add(keys[i])
            if np.dtype(kept[i][0].dtype) == np.float32:
                self._dense_float32[number] = kept[i][0].shape
        done = 0
        if self._ps is not None and new:
            server_keys = [self._server_keys[keys[i]] for i in new]
            self._ps.init(server_keys, [kept[i][0] for i in new])
            if self._coder is not None:
                self._add_codes(server_keys)
                if self._optimizer is not None:
                    self._register_codes(server_keys)
            if self._separate_jobs:
                self._ps.push_pull(server_keys, [], [kept[i][0] for i in new])
                if self._finish is not None:
                    done = self._finish.rejoined("the servers' weights", [kept[i][0] for i in new])
        if self._separate_jobs and new:
            wait_for_leader(self._group_comm, is_leader=self._ps is not None)
            self._group.broadcast(
                op,
                [keys[i] for i in new],
                [kept[i] for i in new],
                [[*kept[i], *outs[i]] for i in new],
                root=0,
            )
            if self.steps_done is None:
                self.steps_done = self._group_comm.bcast(done, root=0)

    def expect_row_sparse_gradients(self, keys: Sequence[Key]) -> None:
        """The servers will keep `keys` row_sparse when they are initialised, dense values
        too, so that their row_sparse gradients update only the rows pushed (lazily)."""
        self._sparse_gradients.update(keys)

    def _init_rows(self, op: str, key: Key, value: mx.nd.NDArray, outs: Arrays) -> None:
        """init of a key the servers keep row_sparse: they keep rank 0's value, every row
        listed (separate group jobs: sync shares group 0's first; async keeps one leader's,
        which every group then takes)."""
        kept = row_sparse.broadcast(self._world, op, key, row_sparse.with_every_row(value))
        if key not in self._server_keys:
            if self._share is not None:
                whole = kept.tostype("default")
                self._share(op, [key], [[whole]])
                kept = row_sparse.with_every_row(whole)
            self._server_keys.add(key)
            self._rows.add(key)
            if self._ps is not None:
                self._ps.init([self._server_keys[key]], [kept])
            if self._separate_jobs:
                kept = self._rows_in_group(op, key, kept, np.arange(kept.shape[0]))
        for out in outs:
            row_sparse.write_into(kept, out)

    def push(
        self, op: str, keys: Sequence[Key], values: Sequence[Arrays], average: bool = False
    ) -> None:
        """Group sum, then the leader's push: the servers apply it (`average`: sync, the
        servers' optimizer divides the sum over all groups by the ranks; async, each
        group pushes its average)."""
        self.push_pull(op, keys, values, outs=None, average=average)

    def pull(self, keys: Sequence[Key], outs: Sequence[Arrays], ignore_sparse: bool = True) -> None:
        """The leader pulls the servers' current weights and broadcasts them in its group;
        row_sparse outs are left alone when `ignore_sparse` (MXNet's rule)."""
        if ignore_sparse:
            skipped = [i for i, o in enumerate(outs) if row_sparse.is_row_sparse(o[0])]
            keys, outs = row_sparse.dense_entries(skipped, keys, outs)
        if keys:
            self.push_pull("pull", keys, values=None, outs=outs)

    def row_sparse_pull(
        self, keys: Sequence[Key], outs: Sequence[Arrays], row_ids: Sequence[Arrays]
    ) -> None:
        """outs = the rows `row_ids` of the servers' weights: the leader pulls the rows any
        rank of its group asks for, and the group shares them."""
        for key, targets, ids in zip(keys, outs, row_ids):
            wanted = [np.unique(i.asnumpy().astype(np.int64)) for i in ids]
            union = np.unique(
                np.concatenate(self._group_comm.allgather(np.unique(np.concatenate(wanted))))
            )
            rows = self._rows_in_group("row_sparse_pull", key, targets[0], union)
            for target, mine in zip(targets, ids):
                row_sparse.rows_of(rows, mine).copyto(target)

    def _rows_in_group(
        self, op: str, key: Key, like: mx.nd.NDArray, union: np.ndarray
    ) -> mx.nd.NDArray:
        """The rows `union` of the servers' weight of `key` (shaped as `like`), pulled by
        the leader and shared in the group (row_sparse, on every rank of the group)."""
        rows = row_sparse.zeros_like(like)
        if self._ps is not None and union.size:
            number = self._server_keys[key]
            if key in self._rows:
                self._ps.push_pull_rows([number], [], [rows], [mx.nd.array(union, dtype=np.int64)])
            else:
                whole = mx.nd.empty(like.shape, dtype=like.dtype)
                self._ps.push_pull([number], [], [whole])
                rows = row_sparse.rows_of(whole, mx.nd.array(union, dtype=np.int64))
        wait_for_leader(self._group_comm, is_leader=self._ps is not None)
        return row_sparse.broadcast(self._group, op, key, rows)

    def push_pull(
        self,
        op: str,
        keys: Sequence[Key],
        values: Optional[Sequence[Arrays]],
        outs: Optional[Sequence[Arrays]],
        average: bool = False,
    ) -> None:
        """push (as push() does) and/or pull in one round trip of the leader to the
        servers (the keys kept row_sparse in a second one, as rows)."""
        if values is not None:
            self._refuse_updates_without_optimizer(op)
            self._refuse_rows_into_dense(op, keys, values)
            self._group.allreduce(op, keys, values, values, average and self._asynchronous)
        if self._ps is not None:
            if values is not None:
                self._send_settings(
                    1.0 / self._world_size
                    if average and not self._asynchronous
                    else self._push_scale
                )
                if self._damping == "staleness":
                    factor = self._staleness_damping()
                    for value in values:
                        damped = value[0]
                        damped *= factor  # in place
            rows = [i for i, k in enumerate(keys) if k in self._rows]
            nothing: List[Optional[Arrays]] = [None] * len(keys)
            pushes: Sequence[Optional[Arrays]] = values or nothing
            pulls: Sequence[Optional[Arrays]] = outs or nothing
            dense_keys, dense_pushes, dense_pulls = row_sparse.dense_entries(
                rows, keys, pushes, pulls
            )
            pulled_as_kept = self._exchange_dense(
                dense_keys,
                dense_pushes,
                dense_pulls,
                pushes=values is not None,
                pulls=outs is not None,
            )
            pulled_as_kept += self._exchange_rows(
                [keys[i] for i in rows], [pushes[i] for i in rows], [pulls[i] for i in rows]
            )
            for kept, out in pulled_as_kept:
                row_sparse.write_into(kept, out)
        if outs is not None:
            wait_for_leader(self._group_comm, is_leader=self._ps is not None)
            self._broadcast_in_group(op, keys, outs)

    def _refuse_updates_without_optimizer(self, op: str) -> None:
        """async: the servers apply every push as an update, which needs their optimizer
        (MXNet's dist_async servers abort: 'Updater needs to be set for async mode')."""
        if self._asynchronous and self._optimizer is None:
            raise MXKVError(
                f"{op}: in MXKV_MODE=async the parameter servers apply every push "
                "to a key as an update, and no optimizer is set: call "
                "set_optimizer first (gluon.Trainer and Module do, with "
                "update_on_kvstore), or pushpull values that were never init'ed "
                "(they are only summed), or use MXKV_MODE=sync"
            )

    def _refuse_rows_into_dense(
        self, op: str, keys: Sequence[Key], values: Sequence[Arrays]
    ) -> None:
        """Raises for a row_sparse gradient of a weight the servers keep dense: their
        optimizer would update every row (momentum, weight decay), where MXNet's stores
        update only the rows pushed (and its dist servers take no such push at all)."""
        dense = [
            k
            for k, v in zip(keys, values)
            if row_sparse.is_row_sparse(v[0]) and k not in self._rows
        ]
        if dense:
            raise MXKVError(
                f"{op}: key(s) {dense!r}: a row_sparse gradient of a weight that the parameter "
                "servers keep dense; initialise the weight with a row_sparse value "
                "(kv.init(key, weight.tostype('row_sparse'))), or call "
                "kv.expect_row_sparse_gradients(keys) before init (gluon.Trainer does this "
                "for parameters with grad_stype='row_sparse', Embedding(sparse_grad=True))"
            )

    def _exchange_rows(
        self,
        keys: Sequence[Key],
        values: Sequence[Optional[Arrays]],
        outs: Sequence[Optional[Arrays]],
    ) -> List[Tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        """The leader's push (as rows) and pull (every row) of keys kept row_sparse; returns
        the (pulled, out) pairs that push_pull writes."""
        if not keys:
            return []
        numbers = [self._server_keys[k] for k in keys]
        pushed = [
            v[0] if row_sparse.is_row_sparse(v[0]) else row_sparse.with_every_row(v[0])
            for v in values
            if v is not None
        ]
        pulled = [row_sparse.zeros_like(o[0]) for o in outs if o is not None]
        every = [mx.nd.arange(o.shape[0], dtype=np.int64) for o in pulled]
        self._server.push_pull_rows(numbers, pushed, pulled, every)
        return list(zip(pulled, [o[0] for o in outs if o is not None]))

    def _exchange_dense(
        self,
        keys: Sequence[Key],
        values: Sequence[Optional[Arrays]],
        outs: Sequence[Optional[Arrays]],
        pushes: bool,
        pulls: bool,
    ) -> List[Tuple[mx.nd.NDArray, mx.nd.NDArray]]:
        """The leader's push and pull of keys kept dense (row_sparse outs pulled through a
        dense array), with the servers' counters; returns the (pulled, out) pairs of
        row_sparse outs, which push_pull writes."""
        server_keys = [self._server_keys[k] for k in keys]
        pushed = [v[0] for v in values if v is not None] if pushes else []  # (all there)
        pulled, through = [], []
        for out in (o[0] for o in outs if o is not None) if pulls else ():  # (all there)
            if row_sparse.is_row_sparse(out):
                through.append((mx.nd.empty(out.shape, dtype=out.dtype), out))
                out = through[-1][0]
            pulled.append(out)
        coded_keys, coded_outs = [], []
        if pushes and self._coder is not None:  # async compression: codes, then the rest
            coded = [i for i, n in enumerate(server_keys) if n in self._coder.parts]
            coded_keys = [server_keys[i] for i in coded]
            self._server.push_pull(*self._coder.encode(coded_keys, [pushed[i] for i in coded]), [])
            coded_outs = [pulled[i] for i in coded] if pulls else []
            rest = sorted(set(range(len(server_keys))) - set(coded))
            server_keys, pushed = [server_keys[i] for i in rest], [pushed[i] for i in rest]
            pulled = [pulled[i] for i in rest] if pulls else []
        if self._optimizer is not None and self._asynchronous:  # pushes counted: staleness
            server_keys.append(COUNTER_KEY)
            pushed += [self._one] if pushes else []
            pulled += [self._counter] if pulls else []
            if self._finish is not None and pushes:  # a key that pushes and pulls
                server_keys.append(FINISH_KEY)
                pushed.append(self._finish.progress())
                pulled += [self._finish.progress()] if pulls else []
        if server_keys:
            self._server.push_pull(server_keys, pushed, pulled)
        if coded_outs:
            self._server.push_pull(coded_keys, [], coded_outs)
        self._count_staleness(pushes, pulls)
        return through

    def _broadcast_in_group(self, op: str, keys: Sequence[Key], outs: Sequence[Arrays]) -> None:
        """The leader's `outs` (each key's first array) into every array of `outs` on
        every rank of the group (row_sparse outs by the sparse collective)."""
        sparse = [i for i, o in enumerate(outs) if row_sparse.is_row_sparse(o[0])]
        for i in sparse:
            value = row_sparse.broadcast(self._group, op, keys[i], outs[i][0])
            for out in outs[i]:
                row_sparse.write_into(value, out)
        keys, outs = row_sparse.dense_entries(sparse, keys, outs)
        if keys:
            self._group.broadcast(op, keys, outs, outs, root=0)

    def consensus(self, keys: Sequence[Key], outs: Sequence[Arrays]) -> None:
        """Collective: `outs` become the servers' weights once every group's last update
        landed (a barrier over all ranks; separate group jobs: over the group, then the
        leaders' finish line, which does not wait for a lost group)."""
        wait_for_leader(self._world.comm, is_leader=False)
        if self._finish is not None and self.has_optimizer:  # else no group pushed anything
            self._finish.cross()
        self.pull(keys, outs)

    def _send_settings(self, gradient_scale: float) -> None:
        """Sends the optimizer's learning rate and rescale_grad (times `gradient_scale`)
        to the servers when they changed, and waits until the servers took them. sync: every
        leader pushes (the servers wait for all), group 0's values and the others' zeros."""
        if self._optimizer is None:
            return
        scheduled = self._optimizer.lr_scheduler is not None  # (then lr may be None, as
        # gluoncv leaves it: the servers' copy follows its own scheduler, ServerOptimizer)
        learning_rate = 0.0 if scheduled else float(self._optimizer.lr)
        settings = (learning_rate, float(self._optimizer.rescale_grad) * gradient_scale)
        if settings == self._sent_settings:
            return
        pushed = settings if self._sends_settings else (0.0, 0.0)
        self._server.push_pull(
            self._settings_keys,
            [mx.nd.array(pushed, dtype="float64") for _ in self._settings_keys],
            [],
        )
        self._sent_settings = settings

    def _staleness_damping(self) -> float:
        """1 / (1 + s) for the gradient this leader pushes now, s the updates of other
        groups the servers applied since it last read the weights (their push counter,
        read just before the push; MXKV_ASYNC_DAMPING=staleness)."""
        self._server.push_pull([COUNTER_KEY], [], [self._counter])
        stale = max(0, self._updates_of_others())
        self.damped.append(stale)
        return 1.0 / (1 + stale)

    def _count_staleness(self, pushed: bool, pulled: bool) -> None:
        """Updates applied between this leader's last two pulls, less its own pushes: the
        other groups' updates its gradient did not see (an upper estimate: updates landing
        between its push and its pull count too)."""
        if self._optimizer is None or not self._asynchronous:
            return
        self._pushes_since_pull += int(pushed)
        if pulled:
            if self._pushes_since_pull:
                self.staleness.append(self._updates_of_others())
            self._count_at_pull, self._pushes_since_pull = float(self._counter.asscalar()), 0

    def _updates_of_others(self) -> int:
        """Updates in the servers' push counter (as last read) since this leader's last
        pull, less its own pushes since."""
        return int(float(self._counter.asscalar()) - self._count_at_pull - self._pushes_since_pull)

    def report(self) -> str:
        """One line about the staleness measured by this leader ('' elsewhere)."""
        if not self.staleness:
            return ""
        values = np.array(self.staleness)
        damped = (
            f"; each damped by 1 / (1 + s), s at the push: mean {np.mean(self.damped):.2f}"
            if self.damped
            else ""
        )
        return (
            f"mxkv_hybrid: {self._who}: {len(values)} asynchronous updates; staleness "
            f"(updates by other groups between reading the weights and applying the "
            f"gradient) mean {values.mean():.2f}, median {np.median(values):.0f}, "
            f"max {values.max()}{damped}"
        )

    def save_optimizer_states(self, fname: str, dump_optimizer: bool) -> None:
        """The servers' optimizer states, each server's share written by that server
        beside `fname` (fname.serverN, on the servers' file system: server_states.py),
        and at `fname` a note naming them. Group 0's leader asks, between two of its steps
        (sync: the others cannot step past it); the other ranks do nothing."""
        if self._ps is None or self._group_index != 0:
            return
        if self._optimizer is None:
            raise MXKVError("save_optimizer_states: no optimizer was set on this store yet")
        action = "save-optimizer" if dump_optimizer else "save"
        self._server.send_command(command(action, fname), f"asking the servers to {action}")
        files = [server_file(os.path.abspath(fname), n) for n in range(self._server.num_servers)]
        note = (
            f"mxkv_hybrid: in MXKV_MODE={self._mode} the optimizer states live on the "
            "parameter servers; each server wrote its share, on its own file system:\n"
            + "".join(f"{name}\n" for name in files)
        )
        write_atomically(fname, note.encode())

    def load_optimizer_states(self, fname: str) -> None:
        """The servers load the states save_optimizer_states had them write (group 0's
        leader asks; each server reads fname.serverN)."""
        if self._ps is None or self._group_index != 0:
            return
        self._server.send_command(command("load", fname), "asking the servers to load states")

    def close(self) -> None:
        """Releases this store's use of the parameter server (leaders); safe to call twice."""
        if self._ps is not None:
            line = self.report()
            if line:
                log.info(line, extra=TO_STDERR)
            self._ps = None
            release()

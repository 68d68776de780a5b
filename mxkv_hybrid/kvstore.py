"""class Hybrid: the KVStore that MXNet sees (mx.kv.create('hybrid'))."""

import logging
from typing import Callable, List, Optional, Sequence, Tuple

import mxnet as mx
from mxnet.kvstore import KVStoreBase

from .capabilities import capabilities_of
from .comm import row_sparse, stall
from .comm.collectives import Arrays, Key, TensorCollectives
from .comm.compression import QuantisedReducer
from .comm.compression_params import Compression, parse_compression
from .comm.topology import groups, world
from .config import Config
from .errors import MXKVError
from .modes.averaging import Averaging, Reducer
from .modes.grouped_sync import GroupedSync
from .modes.parts import parts_for
from .modes.server_weights import ServerWeights
from .modes.worker_weights import WorkerWeights
from .observe.step_summary import summary_for
from .ps.client import barrier_across_groups
from .ps.keys import is_held
from .ps.optimizers import COUNTER_KEY
from .safety.divergence_guard import DivergenceGuard, stop_watching, watch_with
from .safety.fault import FaultInjector
from .safety.finite_check import check_finite

log = logging.getLogger(__name__)


def _as_key_lists(key, value) -> Tuple[List[Key], List[Arrays]]:
    """MXNet's calling conventions -> ([key, ...], [[array per device], ...])."""
    if isinstance(key, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise MXKVError(f"{len(key)} keys need a list of {len(key)} values")
        return list(key), [v if isinstance(v, (list, tuple)) else [v] for v in value]
    return [key], [value if isinstance(value, (list, tuple)) else [value]]


@KVStoreBase.register
class Hybrid(KVStoreBase):
    """Data-parallel KVStore over MPI ranks (docs/modes/, docs/reference/knobs.md).

    Values are combined by fused tensor collectives; pushpull on many keys at once
    (which the Trainer and Module hooks of this package do) reduces them in buckets.
    Weights under an optimizer (update_on_kvstore) are kept by the store on the workers
    (mode allreduce) or by MXNet's parameter servers, which run the optimizer (modes sync,
    async).
    """

    def __init__(self):
        self._config = Config.from_environment()
        self._world = world()
        self._fault = (
            FaultInjector(self._config.fault, self._world.rank)
            if self._config.fault is not None and self._config.attempt == 0
            else None
        )
        self._can = capabilities_of(self._config.mode)
        this_group = groups(self._config.group_size)
        collectives = TensorCollectives(
            self._world.comm,
            self._config,
            this_group,
            hierarchy=self._config.hierarchy if self._can.gradients_allreduced else "off",
        )
        self._collectives: Optional[TensorCollectives] = collectives  # None once closed
        parts = parts_for(self._config, self._world, this_group, collectives)
        self._reducer: Reducer = parts.reducer  # what combines plain values
        self._weights = parts.weights
        self._averaging: Optional[Averaging] = parts.averaging
        self._rejoinable = parts.rejoinable  # modes async, easgd: a restarted group's steps
        self._this_group = this_group
        self._share = parts.share  # separate sync group jobs: a broadcast to the other groups
        self._sparse_gradients: List[Key] = []  # expect_row_sparse_gradients
        self._summary = summary_for(self._config, parts.staleness)  # MXKV_SUMMARY_EVERY
        # rank 0's: the backward hooks feed it the training loss
        self._guard = DivergenceGuard(self._config) if self._world.rank == 0 else None
        if self._guard is not None:
            watch_with(self._guard)

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

    @property
    def weights_on_servers(self) -> bool:
        """Whether the parameter servers hold the weights (sync with its optimizer there,
        async), as dist_sync's do: a Trainer cannot load other weights under them."""
        return isinstance(self._weights, ServerWeights)

    @property
    def _updater(self):
        """The optimizer's updater (Trainer.load_states reads _updater.optimizer)."""
        return self._weights.updater

    def is_capable(self, capability: str) -> bool:
        """Updates can run on the store where the mode's row says so (updates_on_store):
        not in easgd and lasgd, where each group or rank updates its own weights, which the
        averaging then moves."""
        return capability == KVStoreBase.OPTIMIZER and self._can.updates_on_store

    @property
    def averaging(self) -> Optional[Averaging]:
        """Modes easgd and lasgd: this process's averaging schedule (else None)."""
        return self._averaging

    @property
    def steps_done(self) -> int:
        """Optimizer steps this rank's group took before this start: 0, except in a group
        that mxkv-launch --restarts started again (modes async and easgd, each group its
        own MPI job), where it is the count the servers recorded for the lost group. A
        script skips that many steps to train only the steps its group had left."""
        done = 0 if self._rejoinable is None else self._rejoinable.steps_done
        if done is None:
            raise MXKVError(
                "steps_done is known once the store has the model's weights (the "
                "Trainer sends them when it is created with initialised parameters):"
                " create the Trainer after the network's shapes are known (one "
                "forward pass, or in_units/in_channels), then ask"
            )
        return done

    def after_update(self, keys: Sequence[Key], weights: Sequence[Sequence[mx.nd.NDArray]]) -> None:
        """Called by the Trainer and Module hooks after each optimizer step (every tau-th
        step is an elastic exchange in mode easgd, an averaging point in mode lasgd)."""
        averaging = self._averaging
        if averaging is not None:
            self._timed(lambda: averaging.after_step(keys, weights))
            if self._summary is not None:
                self._summary.step_done()

    def consensus(self, keys: Sequence[Key], weights: Sequence[Sequence[mx.nd.NDArray]]) -> None:
        """Collective: every rank's weights become the one model the averaging mode delivers
        (easgd: the centre; lasgd: the average, after applying the one in flight; async:
        the servers' weights once every group's last update landed); the synchronous
        modes' weights already agree, so nothing changes there."""
        if self._averaging is None and not self._can.updates_only_on_servers:
            return
        _to_default_layout(weights)
        if self._averaging is not None:
            self._averaging.consensus(keys, weights)
        else:
            self._active()
            assert isinstance(self._weights, ServerWeights)  # (mode async)
            self._weights.consensus(list(keys), [list(w) for w in weights])

    # ---- data -----------------------------------------------------------------------
    def init(self, key, value) -> None:
        """Keeps rank 0's value under each key (every rank gets the same)."""
        keys, values = _as_key_lists(key, value)
        for k in keys:
            if self._weights.holds(k):
                raise MXKVError(f"init: key {k!r} is already initialised")
        self._active()
        self._weights.init("init", keys, values, outs=[[] for _ in keys])

    def expect_row_sparse_gradients(self, keys) -> None:
        """Declares, before they are initialised, that the gradients of these weights
        (dense ones) are row_sparse: in modes sync and async the servers then keep them
        row_sparse, so that only the rows pushed cross and are updated (lazily), as in
        MXNet's local store. The Trainer hook calls it for parameters with
        grad_stype='row_sparse' (Embedding(sparse_grad=True)); elsewhere it changes nothing."""
        keys = list(keys) if isinstance(keys, (list, tuple)) else [keys]
        self._sparse_gradients += keys
        if isinstance(self._weights, ServerWeights):
            self._weights.expect_row_sparse_gradients(keys)

    def broadcast(self, key, value, out, priority: int = 0) -> None:
        """Copies rank 0's value into `out` on every rank (and keeps it as the weight when an
        optimizer is set, since updates then run on the store)."""
        keys, values = _as_key_lists(key, value)
        _, outs = _as_key_lists(key, out)
        if self._weights.has_optimizer:
            self._active()
            self._weights.init("broadcast", keys, values, outs)
        else:
            self._active().broadcast("broadcast", keys, values, outs)
            if self._share is not None:
                self._share("broadcast", keys, outs)

    def broadcast_weights(self, key, value, out) -> None:
        """broadcast() of model weights (the Trainer and Module hooks use it): the averaging
        modes also take these keys as weights (easgd: a centre variable starts at them;
        lasgd: their gradients stay local). With separate group jobs every group starts
        from the weights the servers keep (async) or the centre's first value (easgd)."""
        keys, values = _as_key_lists(key, value)
        outs = _as_key_lists(key, out)[1]
        if self._can.updates_only_on_servers and not self._world.spans_all_ranks:
            # separate group jobs start from the weights the servers keep (one leader's)
            self._active()
            self._weights.init("broadcast", keys, values, outs)
        else:
            self.broadcast(key, value, out)
        if self._averaging is not None:
            self._averaging.register(keys, [o[0] for o in outs])
            if not self._world.spans_all_ranks:  # each group may have started from the centre
                for copies in outs:
                    for copy in copies[1:]:
                        copies[0].copyto(copy)

    def push(self, key, value, priority: int = 0) -> None:
        """Sums the values of all devices and ranks into the store, as every MXNet store
        does; with an optimizer, the sum is the gradient that updates the weight."""
        self._push(key, value, average=False)

    def push_gradients(self, key, value) -> None:
        """push() of gradients as the Trainer hook pushes them: averaged over ranks
        (MXKV_AVERAGE=1, the default) or summed (0)."""
        self._push(key, value, average=self._config.average)

    def _push(self, key, value, average: bool) -> None:
        keys, values = _as_key_lists(key, value)
        self._require_initialised("push", keys)
        self._active()
        self._timed(lambda: self._weights.push("push", keys, values, average))

    def pull(self, key, out=None, priority: int = 0, ignore_sparse: bool = True) -> None:
        """Copies the kept value of each key into `out`; row_sparse outs are skipped
        when `ignore_sparse` (MXNet's rule: they take row_sparse_pull)."""
        keys, outs = _as_key_lists(key, out)
        self._require_initialised("pull", keys)
        self._active()
        self._timed(lambda: self._weights.pull(keys, outs, ignore_sparse))

    def pushpull(self, key, value, out=None, priority: int = 0) -> None:
        """out (default: value, in place) = the sum over all devices and ranks, in one
        fused collective, as every MXNet store sums.

        With an optimizer set, keys that hold a weight (init/broadcast) are updated and `out`
        receives the new weight; other keys (metrics, say) are only summed."""
        self._pushpull(key, value, out, average=False)

    def pushpull_gradients(self, key, value, out=None) -> None:
        """pushpull() of gradients as the Trainer and Module hooks call it (once a step):
        averaged over ranks (MXKV_AVERAGE=1, the default: the step one process takes on
        the union of the batches) or summed (0: gluon.Trainer's convention with dist_sync)."""
        self._pushpull(key, value, out, average=self._config.average)

    def _pushpull(self, key, value, out, average: bool) -> None:
        if self._fault is not None:
            self._fault.step()
        keys, values = _as_key_lists(key, value)
        outs = values if out is None else _as_key_lists(key, out)[1]
        self._active()
        self._timed(lambda: self._combine(keys, values, outs, average))
        if self._summary is not None and self._averaging is None:  # else: after_update ends it
            self._summary.step_done()

    def _combine(
        self, keys: List[Key], values: List[Arrays], outs: List[Arrays], average: bool
    ) -> None:
        """pushpull's work: updates the keys that hold a weight, combines the others."""
        if self._config.check_finite:
            check_finite("pushpull", keys, values, self._world.rank)
        updated = [i for i, k in enumerate(keys) if self._weights.updates(k)]
        plain = [i for i, k in enumerate(keys) if not self._weights.updates(k)]
        if plain:
            self._reducer.allreduce(
                "pushpull",
                [keys[i] for i in plain],
                [values[i] for i in plain],
                [outs[i] for i in plain],
                average,
            )
        if updated:
            self._weights.push_pull(
                "pushpull",
                [keys[i] for i in updated],
                [values[i] for i in updated],
                [outs[i] for i in updated],
                average,
            )

    def row_sparse_pull(self, key, out=None, priority: int = 0, row_ids=None) -> None:
        """Copies the rows `row_ids` (an NDArray of row ids per out, or one for all) of each
        key's kept value into `out` (row_sparse arrays), as MXNet's stores do."""
        keys, outs = _as_key_lists(key, out)
        if row_ids is None:
            raise MXKVError("row_sparse_pull: row_ids is required (the ids of the rows to pull)")
        _, ids = _as_key_lists(key, row_ids)
        ids = [[i[0]] * len(o) if len(i) == 1 else i for i, o in zip(ids, outs)]
        dense = [k for k, o in zip(keys, outs) if not all(map(row_sparse.is_row_sparse, o))]
        if dense:
            raise MXKVError(
                f"row_sparse_pull: key(s) {dense!r}: out must be row_sparse "
                "NDArrays (pull copies into dense ones)"
            )
        if any(len(i) != len(o) for i, o in zip(ids, outs)):
            raise MXKVError("row_sparse_pull: give one row_ids array per out array, or one for all")
        self._require_initialised("row_sparse_pull", keys)
        self._active()
        with mx.autograd.pause():  # Parameter.row_sparse_data pulls inside a record section
            self._timed(lambda: self._weights.row_sparse_pull(keys, outs, ids))

    def set_gradient_compression(self, compression_params) -> None:
        """MXNet's 2-bit compression, {'type': '2bit', 'threshold': t}, or {'type': '1bit'}:
        from now on every float32 value pushed is quantised with the residual kept (error
        feedback) and the codes summed (comm/compression.py). Mode allreduce: per rank
        (flat 2-bit is dist_sync's result, in 2 bits a value) or per group (hierarchical).
        Mode sync: each group's sum, as codes the servers sum (ps/summed_codes.py);
        call it before set_optimizer (Trainer and Module do): the optimizer then runs on
        every rank, since the servers see codes, not gradients. Mode async: each group's
        gradient of a weight, as codes the servers decode and apply, as MXNet's dist_async
        servers do (ps/coded_gradients.py; before set_optimizer too). Modes easgd, lasgd:
        each rank's gradients where ranks sum them (easgd: in the group; lasgd: in the
        warm-up); the weights' averaging stays float32."""
        compression = parse_compression(compression_params)
        if self._config.compress != "none":
            raise MXKVError(
                f"set_gradient_compression: MXKV_COMPRESS={self._config.compress} "
                "already compresses float32 values; use one of the two"
            )
        if isinstance(self._reducer, GroupedSync):  # sync: group sums through the servers
            self._compress_across_groups(compression)
            return
        if self._can.updates_only_on_servers:
            self._active()
            assert isinstance(self._weights, ServerWeights)
            self._weights.compress_gradients(compression)
            return
        if not self._can.compression_across_groups:  # only inside a group; averages float32
            self._active()
            assert self._averaging is not None  # (modes easgd, lasgd)
            self._averaging.compress_gradients(compression)
            return
        assert isinstance(self._weights, WorkerWeights)  # (mode allreduce)
        self._reducer = QuantisedReducer(self._active(), compression)
        self._weights.reduce_with(self._reducer)

    def _compress_across_groups(self, compression: Compression) -> None:
        """Mode sync: the leaders' group sums cross as codes the servers sum."""
        if not isinstance(self._weights, WorkerWeights):
            raise MXKVError(
                "set_gradient_compression: the parameter servers already run this "
                "store's optimizer; call set_gradient_compression before "
                "set_optimizer (gluon.Trainer and Module do), so that the optimizer "
                "runs on every rank and the servers sum the codes"
            )
        self._active()
        assert isinstance(self._reducer, GroupedSync)  # (mode sync)
        self._reducer.compress_across_groups(compression)

    def barrier(self) -> None:
        """Waits until every rank gets here (separate group jobs: the group's ranks, and
        the group leaders through the parameter server)."""
        with stall.waiting("barrier"):
            self._world.comm.Barrier()
        if not self._world.spans_all_ranks:
            barrier_across_groups()
            with stall.waiting("barrier (the leader's barrier with the other groups)"):
                self._world.comm.Barrier()

    # ---- optimizer on the store -------------------------------------------------------
    def set_optimizer(self, optimizer: mx.optimizer.Optimizer) -> None:
        """Updates run on the store from now on, with this optimizer (mode allreduce: the
        object itself; sync, async: a copy sent to the servers, with later changes of its
        learning rate or rescale_grad sent before the next gradient; sync with gradient
        compression: the object itself, on every rank)."""
        if (
            self._can.optimizer_on_servers
            and isinstance(self._weights, WorkerWeights)
            and isinstance(self._reducer, GroupedSync)
            and not self._reducer.compresses_across_groups
        ):
            self._move_weights_to_servers()
        self._weights.set_optimizer(optimizer)

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Writes the optimizer state (identical on every rank) atomically to `fname`."""
        self._weights.save_optimizer_states(fname, dump_optimizer)

    def load_optimizer_states(self, fname: str) -> None:
        self._weights.load_optimizer_states(fname)

    def close(self) -> None:
        """Leaves the parameter server (modes sync, async) and frees the buffers; the store
        cannot be used afterwards."""
        if isinstance(self._reducer, GroupedSync):
            self._reducer.close()
        if self._averaging is not None:
            self._averaging.close()
        self._weights.close()
        self._collectives = None
        stop_watching(self._guard)

    # ---- helpers ----------------------------------------------------------------------
    def _move_weights_to_servers(self) -> None:
        """Mode sync: the servers take the weights and will run the optimizer, as MXNet's
        dist_sync servers do, unless another store of this process has its optimizer there
        (the servers hold one per process): then this store updates on the workers."""
        if is_held(COUNTER_KEY):
            if self._world.rank == 0:
                log.warning(
                    "mxkv_hybrid: another hybrid store of this process runs its "
                    "optimizer on the parameter servers (they hold one per process): "
                    "this store's runs on every rank"
                )
            return
        assert isinstance(self._weights, WorkerWeights)  # (until now)
        kept = self._weights.kept()
        servers = ServerWeights(
            self._config, self._world, self._this_group, self._active(), self._share
        )
        servers.expect_row_sparse_gradients(self._sparse_gradients)
        if kept:
            servers.init("init", list(kept), [[w] for w in kept.values()], [[] for _ in kept])
        self._weights.close()
        self._weights = servers

    def _active(self) -> TensorCollectives:
        """The collectives over all ranks; raises once the store is closed."""
        if self._collectives is None:
            raise MXKVError("this hybrid kvstore was closed; create a new one")
        return self._collectives

    def _timed(self, call: Callable[[], object]) -> None:
        """call(), counted as time in the store by the step summary (MXKV_SUMMARY_EVERY)."""
        if self._summary is None:
            call()
        else:
            self._summary.timed(call)

    def _require_initialised(self, op: str, keys: Sequence[Key]) -> None:
        missing = [k for k in keys if not self._weights.holds(k)]
        if missing:
            raise KeyNotInitialised(f"{op}: key(s) {missing!r} not initialised; call init first")


class KeyNotInitialised(MXKVError, mx.base.MXNetError):
    """A key used before init: the MXNetError that MXNet's stores raise there."""


def _to_default_layout(weights: Sequence[Sequence[mx.nd.NDArray]]) -> None:
    """Puts every dense weight back in MXNet's default layout, in place: an inference
    forward (the usual last thing before consensus) can leave one in MKLDNN's, and MXNet
    1.9.1 cannot copy into a 3-D one (a Conv1D weight: "Check failed: to.IsDefaultData()"
    when the servers' weights are pulled into it). An operator's output can be written."""
    for arrays in weights:
        for weight in arrays:
            if not row_sparse.is_row_sparse(weight):
                mx.nd.identity(weight.copy(), out=weight)

"""MXKV_MODE=lasgd: local SGD whose model averaging overlaps the following local steps.

Every rank updates its own weights x from its own gradients (the devices of one process
are summed, nothing crosses processes; times MXKV_LOCAL_LR_SCALE, local_lr_scale.py).
Every tau steps (after the warm-up steps, which run synchronous SGD over all ranks,
"post-local SGD") an averaging point:

1. the average started at the previous point is applied: x += A - S, where S is the
   snapshot this rank took then and A the mean of every rank's S; the local progress
   x - S made while the average travelled is kept on top of the average;
2. a new one starts: S = x, A = x, and A is averaged over all ranks by a non-blocking
   allreduce (MXKV_OVERLAP's engine operations and communication thread) that runs while
   the next tau local steps compute.

Step 1 does not change the mean of x over the ranks (the mean of A - S is 0). With
MXKV_LASGD_OVERLAP=0 the average is blocking instead: x = mean of x at every point.
With an outer optimizer (MXKV_OUTER, outer_optimizer.py) the mean is its gradient, and
x (blocking) or A (overlapped) becomes the outer step's new model. With P fragments
(MXKV_FRAGMENTS, fragments.py; Streaming DiLoCo) there is a point every tau / P steps,
and each averages the next fragment only: every fragment is still averaged every tau
steps, and an overlapped one is applied tau / P steps later, at the next point.
`consensus` ends the delay: it applies what is in flight, then averages (blocking), so
every rank holds the same model (use it before evaluating or saving a final model)."""

import logging
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple, Union

import mxnet as mx

from ..comm.collectives import Arrays, Key, TensorCollectives
from ..comm.compression import QuantisedReducer
from ..comm.compression_params import Compression
from ..comm.topology import World, groups
from ..config import LASGD_OVERLAP_MAX_DELAY, Config
from ..errors import MXKVError
from ..logs import TO_STDERR
from .averaging import allreduce_split, check_saved_with, check_state_mode
from .fragments import Piece, cut_into_fragments
from .local_lr_scale import local_lr_scale, scaled
from .outer_optimizer import OuterOptimizer, outer_optimizer_of
from .quantised_changes import QuantisedChanges
from .rounded_deltas import RoundedDeltas

log = logging.getLogger(__name__)


def averages_config(config: Config) -> Config:
    """The settings of the periodic model averages: with MXKV_ALGO=auto, the ring. The
    averages run behind the next tau steps (or once in tau steps), so their bytes across
    the slow link count and their latency does not; auto's table picks recursive doubling
    for small messages, which sends log2(P) times the message where the ring sends
    2 (P - 1) / P times it (Streaming DiLoCo's fragments sent 2x the ring's bytes)."""
    return replace(config, algorithm="ring") if config.algorithm == "auto" else config


def changes_of(
    compress: str, averaging: TensorCollectives
) -> Optional[Union[RoundedDeltas, QuantisedChanges]]:
    """How MXKV_COMPRESS's averages send each rank's change (None: the models themselves)."""
    if compress == "none":
        return None
    return (
        QuantisedChanges(averaging)
        if compress == QuantisedChanges.compress
        else RoundedDeltas(compress)
    )


class DeviceSum:
    """The local steps' reduction: each key's inputs summed over this process's devices by
    MXNet's own operations, in order in its engine. Not a collective: it never waits for
    the engine, so the average in flight keeps overlapping the local steps (a blocking
    collective, even over one rank, waits for every operation the engine holds)."""

    def allreduce(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
    ) -> None:
        for arrays, results in zip(inputs, outputs):
            total = arrays[0]
            if len(arrays) > 1:
                total = mx.nd.add_n(*(a.as_in_context(total.context) for a in arrays))
            for result in results:
                if result.handle.value != total.handle.value:
                    total.copyto(result)


class LocalSGD:
    """The averaging schedule of mode lasgd, and the store's reducer in that mode:
    registered weights' gradients stay in the process, other values (metrics) are
    averaged over all ranks."""

    def __init__(
        self,
        config: Config,
        world: World,
        period: Optional[int] = None,
        warmup_steps: Optional[int] = None,
        overlap: Optional[bool] = None,
        fragments: Optional[int] = None,
    ):
        self.period = config.tau if period is None else period
        self.fragments = config.fragments if fragments is None else fragments
        self.warmup_steps = config.warmup_steps if warmup_steps is None else warmup_steps
        self.overlap = config.lasgd_overlap if overlap is None else overlap
        if overlap is None and config.lasgd_overlap_by_rule and not self.overlap:
            _say_the_averages_block(self.period, self.fragments, world.rank == 0)
        self.steps = 0
        self.rounds = 0  # averagings started
        blocking = replace(config, overlap=False)
        this_group = groups(config.group_size)  # the emulated slow link runs between groups
        self._world = TensorCollectives(world.comm, blocking, this_group)
        self.gradients: TensorCollectives | QuantisedReducer = self._world  # in the warm-up
        self._local = scaled(  # MXKV_LOCAL_LR_SCALE
            DeviceSum(),
            local_lr_scale(config.local_lr_scale, self.period, world.size, world.rank == 0),
        )
        self._averaging = TensorCollectives(  # the periodic averages
            world.comm, replace(averages_config(config), overlap=self.overlap), this_group
        )
        self._weight_keys: set = set()
        self._fragments: Dict[Tuple[Key, ...], List[List[Piece]]] = {}  # by the keys stepped
        self._snapshot: Dict[Key, mx.nd.NDArray] = {}  # S of each piece, by its name
        self._average: Dict[Key, mx.nd.NDArray] = {}  # A: the mean of S, being computed
        self._in_flight: List[Piece] = []
        self._in_flight_keys: Tuple[Key, ...] = ()  # the keys stepped when it started
        # 16-bit and 1-bit averages send changes from the anchor, which plain averaging
        # keeps as an outer SGD with lr 1 and no momentum
        self._deltas = changes_of(config.compress, self._averaging)
        self._outer = (
            outer_optimizer_of(config, announce=world.rank == 0)
            if config.outer != "none"
            else OuterOptimizer("sgd", 1.0, 0.0)
            if self._deltas is not None
            else None
        )

    @property
    def buckets_in_flight(self) -> int:
        """Buckets of the overlapped average not yet reduced (MXKV_LASGD_OVERLAP=1)."""
        return self._averaging.overlapped_buckets_pending

    # ---- the store's reducer ----------------------------------------------------------
    def allreduce(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
    ) -> None:
        """Gradients of registered weights: summed over this process's devices (over all
        ranks during the warm-up); any other key: over all ranks."""
        local = self.steps >= self.warmup_steps
        allreduce_split(
            op,
            keys,
            inputs,
            outputs,
            average,
            self._weight_keys.__contains__,
            weights=self._local if local else self.gradients,
            others=self._world,
        )

    def compress_gradients(self, compression: Compression) -> None:
        """set_gradient_compression: in the warm-up, each rank's gradients are quantised
        (with its residual) before all ranks sum them; after it they stay in the process,
        and model averaging stays float32."""
        self.gradients = QuantisedReducer(self._world, compression)

    # ---- the averaging schedule ---------------------------------------------------------
    def register(self, keys: Sequence[Key], weights: Sequence[mx.nd.NDArray]) -> None:
        """Marks `keys` as weights (their gradients stay local after the warm-up)."""
        self._weight_keys.update(keys)
        if self._outer is not None:  # the model every rank starts from
            self._outer.anchor(keys, weights)

    def after_step(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> bool:
        """Counts an optimizer step; every (tau / fragments)-th one after the warm-up is an
        averaging point, of fragment (point - 1) mod fragments."""
        self.steps += 1
        if self._outer is not None and self.steps == self.warmup_steps:  # the model shared
            self._outer.anchor(keys, [copies[0] for copies in weights])  # after the warm-up
        interval = self.period // self.fragments
        if self.steps <= self.warmup_steps or (self.steps - self.warmup_steps) % interval:
            return False
        point = (self.steps - self.warmup_steps) // interval
        self.average(keys, weights, fragment=(point - 1) % self.fragments)
        return True

    def average(self, keys: Sequence[Key], weights: Sequence[Arrays], fragment: int = 0) -> None:
        """One averaging point of one fragment (collective: every rank calls it at the same
        step)."""
        pieces = self._fragments_of(keys, weights)[fragment]
        names = [piece.name for piece in pieces]
        if not self.overlap:
            views = _views(pieces, keys, weights)
            if self._deltas is None:
                self._averaging.allreduce(
                    "model averaging", names, _first(views), views, average=True
                )
            else:
                self._average_changes(pieces, views, self._averaging)
            if self._outer is not None:
                self._outer.step(pieces, views)
            self.rounds += 1
            return
        self._apply_in_flight(keys, weights)
        for piece, copies in zip(pieces, _views(pieces, keys, weights)):
            if piece.name not in self._snapshot:
                shape, where, dtype = copies[0].shape, copies[0].context, copies[0].dtype
                self._snapshot[piece.name] = mx.nd.empty(shape, ctx=where, dtype=dtype)
                self._average[piece.name] = mx.nd.empty(shape, ctx=where, dtype=dtype)
            copies[0].copyto(self._snapshot[piece.name])
            copies[0].copyto(self._average[piece.name])
        if self._deltas is not None:  # A = this rank's change since the anchor
            self._deltas.changes(
                names,
                self._anchors(pieces),
                [self._snapshot[name] for name in names],
                [self._average[name] for name in names],
            )
        averages = [[self._average[name]] for name in names]
        if self._deltas is None:
            self._averaging.allreduce("model averaging", names, averages, averages, average=True)
        else:  # (1-bit codes block: applied at the next point all the same)
            self._deltas.average(self._averaging, names, averages)
        self._in_flight, self._in_flight_keys = pieces, tuple(keys)
        self.rounds += 1

    def consensus(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None:
        """Applies the average in flight, then averages at once: identical weights everywhere
        (with MXKV_COMPRESS: as changes from the anchor, as every average)."""
        if self.overlap:
            self._apply_in_flight(keys, weights)
        if self._deltas is None:
            self._world.allreduce("model averaging", keys, _first(weights), weights, average=True)
            return
        whole = cut_into_fragments(keys, [copies[0].size for copies in weights], 1)[0]
        # (1-bit: where the codes' residuals are, which always block)
        collective = self._averaging if self._deltas.residuals_in_collectives else self._world
        self._average_changes(whole, _views(whole, keys, weights), collective)

    def _average_changes(
        self,
        pieces: Sequence[Piece],
        views: List[List[mx.nd.NDArray]],
        collective: TensorCollectives,
    ) -> None:
        """Blocking (`collective` a blocking one), as changes: every copy of each piece
        becomes anchor - mean(d)."""
        assert self._deltas is not None  # (called with MXKV_COMPRESS only)
        names = [piece.name for piece in pieces]
        anchors = self._anchors(pieces)
        changes = [
            mx.nd.empty(copies[0].shape, ctx=copies[0].context, dtype=copies[0].dtype)
            for copies in views
        ]
        self._deltas.changes(names, anchors, [copies[0] for copies in views], changes)
        self._deltas.average(collective, names, [[c] for c in changes])
        self._deltas.models(anchors, changes)
        for change, copies in zip(changes, views):
            for copy in copies:
                change.copyto(copy)

    def _anchors(self, pieces: Sequence[Piece]) -> List[mx.nd.NDArray]:
        """The anchor of each piece (16-bit averages: there is an outer optimizer)."""
        assert self._outer is not None
        return [self._outer.anchor_of(piece) for piece in pieces]

    def _fragments_of(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> List[List[Piece]]:
        """The fragments of the model these keys make (the same on every rank)."""
        if tuple(keys) not in self._fragments:
            sizes = [copies[0].size for copies in weights]
            self._fragments[tuple(keys)] = cut_into_fragments(keys, sizes, self.fragments)
        return self._fragments[tuple(keys)]

    def _apply_in_flight(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None:
        """x += A - S on every device's copy of each piece in flight (MXNet's engine waits
        for A); with an outer optimizer A first becomes its step's new model."""
        if not self._in_flight:
            return
        if tuple(keys) != self._in_flight_keys:
            raise MXKVError(
                f"lasgd: the averaging of keys {list(self._in_flight_keys)!r} is in "
                f"flight, but this step updated keys {list(keys)!r}: every step must "
                "update the same parameters (freeze parameters with grad_req='null' "
                "before training starts)"
            )
        averages = [[self._average[piece.name]] for piece in self._in_flight]
        if self._deltas is not None:  # the mean change becomes the mean model
            self._deltas.models(self._anchors(self._in_flight), [copies[0] for copies in averages])
        if self._outer is not None:
            self._outer.step(self._in_flight, averages)
        for piece, copies in zip(self._in_flight, _views(self._in_flight, keys, weights)):
            correction = self._average[piece.name] - self._snapshot[piece.name]
            for copy in copies:
                copy += correction.as_in_context(copy.context)
        self._in_flight = []

    # ---- checkpoints --------------------------------------------------------------------
    def state(self) -> dict:
        """The step counter and this rank's average in flight (waits for it)."""
        return {
            "mode": "lasgd",
            "steps": self.steps,
            "rounds": self.rounds,
            "fragments": self.fragments,
            "in_flight_keys": list(self._in_flight_keys),
            "in_flight": [
                (
                    (p.key, p.start, p.stop, p.size),
                    self._snapshot[p.name].asnumpy(),
                    self._average[p.name].asnumpy(),
                )
                for p in self._in_flight
            ],
            "outer": None if self._outer is None else self._outer.state(),
            "deltas": None if self._deltas is None else self._deltas.state(),
        }

    def load_state(self, state: dict) -> None:
        check_state_mode(state, "lasgd")
        self.steps, self.rounds = state["steps"], state["rounds"]
        if state.get("fragments", 1) != self.fragments:
            raise MXKVError(
                f"lasgd: this checkpoint was written with MXKV_FRAGMENTS="
                f"{state.get('fragments', 1)}, and this job has {self.fragments}: "
                "resume with the same setting"
            )
        check_saved_with(
            state, "deltas", self._deltas is not None, "lasgd", "averaged changes (MXKV_COMPRESS)"
        )
        check_saved_with(
            state, "outer", self._outer is not None, "lasgd", "an outer optimizer (MXKV_OUTER)"
        )
        if self._outer is not None:
            self._outer.load_state(state["outer"])
        if self._deltas is not None:
            self._deltas.load_state(state["deltas"])
        self._in_flight = []
        for where, snapshot, average in state["in_flight"]:  # older checkpoints: whole keys
            piece = (
                Piece(*where)
                if isinstance(where, tuple)
                else Piece(where, 0, snapshot.size, snapshot.size)
            )
            self._snapshot[piece.name] = mx.nd.array(snapshot, dtype=snapshot.dtype)
            self._average[piece.name] = mx.nd.array(average, dtype=average.dtype)
            self._in_flight.append(piece)
        self._in_flight_keys = tuple(
            state.get("in_flight_keys", [piece.key for piece in self._in_flight])
        )
        if self._in_flight and not self.overlap:
            raise MXKVError(
                "lasgd: this checkpoint holds an average in flight, written with "
                "MXKV_LASGD_OVERLAP=1; resume with MXKV_LASGD_OVERLAP=1"
            )

    def close(self) -> None:
        """Waits for the average in flight (the communication thread then ends at exit)."""
        self._averaging.finish()


def _views(
    pieces: Sequence[Piece], keys: Sequence[Key], weights: Sequence[Arrays]
) -> List[List[mx.nd.NDArray]]:
    """Each piece's view of every device's copy of its weight."""
    index = {key: i for i, key in enumerate(keys)}
    return [[piece.view(copy) for copy in weights[index[piece.key]]] for piece in pieces]


def _first(copies_per_key: Sequence[Arrays]) -> List[List[mx.nd.NDArray]]:
    """Each key's first device copy: a rank's copies are one model (an allreduce of all of
    them would add them up), and the average is written to every copy."""
    return [[copies[0]] for copies in copies_per_key]


def _say_the_averages_block(period: int, fragments: int, announce: bool) -> None:
    """Rank 0 (`announce`) says at start that MXKV_LASGD_OVERLAP's rule chose blocking."""
    if announce:
        log.info(
            f"mxkv_hybrid: lasgd's averages block (MXKV_LASGD_OVERLAP=0): overlapped, each "
            f"would land MXKV_TAU {period} / MXKV_FRAGMENTS {fragments} steps late, past "
            f"the {LASGD_OVERLAP_MAX_DELAY} of MXKV_LASGD_OVERLAP's rule, where the model "
            "fell short of allreduce's (the lasgd mode's page); set "
            "MXKV_LASGD_OVERLAP=1 to overlap them",
            extra=TO_STDERR,
        )

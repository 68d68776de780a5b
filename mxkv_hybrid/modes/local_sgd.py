"""MXKV_MODE=lasgd: local SGD whose model averaging overlaps the following local steps.

Every rank updates its own weights x from its own gradients (the devices of one process
are summed, nothing crosses processes). Every tau steps (after the warm-up steps, which
run synchronous SGD over all ranks, "post-local SGD") an averaging point:

1. the average started at the previous point is applied: x += A - S, where S is the
   snapshot this rank took then and A the mean of every rank's S; the local progress
   x - S made while the average travelled is kept on top of the average;
2. a new one starts: S = x, A = x, and A is averaged over all ranks by a non-blocking
   allreduce (MXKV_OVERLAP's engine operations and communication thread) that runs while
   the next tau local steps compute.

Step 1 does not change the mean of x over the ranks (the mean of A - S is 0). With
MXKV_LASGD_OVERLAP=0 the average is blocking instead: x = mean of x at every point.
`consensus` ends the delay: it applies what is in flight, then averages (blocking), so
every rank holds the same model (use it before evaluating or saving a final model)."""
from dataclasses import replace
from typing import Dict, List, Optional, Sequence

import mxnet as mx

from ..comm.collectives import Arrays, Key, TensorCollectives
from ..comm.compression import QuantisedReducer
from ..comm.compression_params import Compression
from ..comm.topology import World, groups
from ..config import Config
from ..errors import MXKVError
from .averaging import allreduce_split, check_state_mode
from .outer_optimizer import OuterOptimizer


class DeviceSum:
    """The local steps' reduction: each key's inputs summed over this process's devices by
    MXNet's own operations, in order in its engine. Not a collective: it never waits for
    the engine, so the average in flight keeps overlapping the local steps (a blocking
    collective, even over one rank, waits for every operation the engine holds)."""

    def allreduce(self, op: str, keys: Sequence[Key], inputs: Sequence[Arrays],
                  outputs: Sequence[Arrays], average: bool) -> None:
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

    def __init__(self, config: Config, world: World, period: Optional[int] = None,
                 warmup_steps: Optional[int] = None, overlap: Optional[bool] = None):
        self.period = config.tau if period is None else period
        self.warmup_steps = config.warmup_steps if warmup_steps is None else warmup_steps
        self.overlap = config.lasgd_overlap if overlap is None else overlap
        self.steps = 0
        self.rounds = 0  # averagings started
        blocking = replace(config, overlap=False)
        this_group = groups(config.group_size)  # the emulated slow link runs between groups
        self._world = TensorCollectives(world.comm, blocking, this_group)
        self.gradients: "TensorCollectives | QuantisedReducer" = self._world  # in the warm-up
        self._local = DeviceSum()
        self._averaging = TensorCollectives(world.comm, replace(config, overlap=self.overlap),
                                            this_group)
        self._weight_keys: set = set()
        self._snapshot: Dict[Key, mx.nd.NDArray] = {}  # S: this rank's x when the average began
        self._average: Dict[Key, mx.nd.NDArray] = {}   # A: the mean of S, being computed
        self._in_flight: List[Key] = []
        self._outer = (OuterOptimizer(config.outer, config.outer_lr, config.outer_momentum)
                       if config.outer != "none" else None)

    @property
    def buckets_in_flight(self) -> int:
        """Buckets of the overlapped average not yet reduced (MXKV_LASGD_OVERLAP=1)."""
        return self._averaging.overlapped_buckets_pending

    # ---- the store's reducer ----------------------------------------------------------
    def allreduce(self, op: str, keys: Sequence[Key], inputs: Sequence[Arrays],
                  outputs: Sequence[Arrays], average: bool) -> None:
        """Gradients of registered weights: summed over this process's devices (over all
        ranks during the warm-up); any other key: over all ranks."""
        local = self.steps >= self.warmup_steps
        allreduce_split(op, keys, inputs, outputs, average, self._weight_keys.__contains__,
                        weights=self._local if local else self.gradients, others=self._world)

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
        """Counts an optimizer step; every tau-th one after the warm-up is an averaging point."""
        self.steps += 1
        if self._outer is not None and self.steps == self.warmup_steps:  # the model shared
            self._outer.anchor(keys, [copies[0] for copies in weights])  # after the warm-up
        if self.steps <= self.warmup_steps or (self.steps - self.warmup_steps) % self.period:
            return False
        self.average(keys, weights)
        return True

    def average(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None:
        """One averaging point (collective: every rank calls it at the same step)."""
        if not self.overlap:
            self._world.allreduce("model averaging", keys, weights, weights, average=True)
            if self._outer is not None:
                self._outer.step(keys, weights)
            self.rounds += 1
            return
        self._apply_in_flight(keys, weights)
        for k, w in zip(keys, weights):
            if k not in self._snapshot:
                self._snapshot[k] = mx.nd.empty(w[0].shape, ctx=w[0].context, dtype=w[0].dtype)
                self._average[k] = mx.nd.empty(w[0].shape, ctx=w[0].context, dtype=w[0].dtype)
            w[0].copyto(self._snapshot[k])
            w[0].copyto(self._average[k])
        averages = [[self._average[k]] for k in keys]
        self._averaging.allreduce("model averaging", keys, averages, averages, average=True)
        self._in_flight = list(keys)
        self.rounds += 1

    def consensus(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None:
        """Applies the average in flight, then averages at once: identical weights everywhere."""
        if self.overlap:
            self._apply_in_flight(keys, weights)
        self._world.allreduce("model averaging", keys, weights, weights, average=True)

    def _apply_in_flight(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None:
        """x += A - S on every device's copy (MXNet's engine waits for A)."""
        if not self._in_flight:
            return
        if list(keys) != self._in_flight:
            raise MXKVError(f"lasgd: the averaging of keys {self._in_flight!r} is in flight, but "
                            f"this step updated keys {list(keys)!r}: every step must update the "
                            "same parameters (freeze parameters with grad_req='null' before "
                            "training starts)")
        for k, w in zip(keys, weights):
            correction = self._average[k] - self._snapshot[k]
            for copy in w:
                copy += correction.as_in_context(copy.context)
        self._in_flight = []

    # ---- checkpoints --------------------------------------------------------------------
    def state(self) -> dict:
        """The step counter and this rank's average in flight (waits for it)."""
        return {"mode": "lasgd", "steps": self.steps, "rounds": self.rounds,
                "in_flight": [(k, self._snapshot[k].asnumpy(), self._average[k].asnumpy())
                              for k in self._in_flight],
                "outer": None if self._outer is None else self._outer.state()}

    def load_state(self, state: dict) -> None:
        check_state_mode(state, "lasgd")
        self.steps, self.rounds = state["steps"], state["rounds"]
        if (state.get("outer") is None) != (self._outer is None):
            raise MXKVError("lasgd: this checkpoint was written "
                            + ("without" if self._outer is not None else "with")
                            + " an outer optimizer (MXKV_OUTER); resume with the same setting")
        if self._outer is not None:
            self._outer.load_state(state["outer"])
        self._in_flight = []
        for k, snapshot, average in state["in_flight"]:
            self._snapshot[k] = mx.nd.array(snapshot, dtype=snapshot.dtype)
            self._average[k] = mx.nd.array(average, dtype=average.dtype)
            self._in_flight.append(k)
        if self._in_flight and not self.overlap:
            raise MXKVError("lasgd: this checkpoint holds an average in flight, written with "
                            "MXKV_LASGD_OVERLAP=1; resume with MXKV_LASGD_OVERLAP=1")

    def close(self) -> None:
        """Waits for the average in flight (the communication thread then ends at exit)."""
        self._averaging.finish()


"""The divergence guard: rank 0 watches its training loss, and when training runs away it
says, once, which knob of the job's mode to change.

The loss is what Gluon's backward starts from (`loss.backward()`, `autograd.backward`):
rank 0 queues its mean at every backward and reads it at the next one, so nothing waits
for it. WINDOW readings make a window; the guard compares each window's median with the
first's, the loss of a model that has learned nothing yet. A model that first brought its
loss below LEARNED of that and then back above UNLEARNED of it has lost what it learned:
the bound needs no tuning to the task. A non-finite loss is divergence too. The run goes
on unless MXKV_FAIL_ON_DIVERGENCE=1, which raises DivergenceError on rank 0 (mxkv-launch
then stops the other ranks). Module jobs have no such head (their gradients start from
the symbol's outputs): MXKV_CHECK_FINITE catches their NaN/Inf."""

import logging
import math
import statistics
from typing import List, Optional, Sequence

import mxnet as mx

from ..capabilities import capabilities_of
from ..config import Config
from ..errors import DivergenceError
from ..logs import TO_STDERR

log = logging.getLogger(__name__)

WINDOW = 10  # readings (backward calls) per window: its median ignores a few odd batches
LEARNED = 0.5  # a window this fraction of the first: the model had learned
UNLEARNED = 0.9  # back above this fraction of the first: it lost that again


def advice_for(config: Config) -> str:
    """What to change when a job with `config` diverges: the knob of its mode that sets
    how far the shared model moves, else the script's learning rate."""
    can = capabilities_of(config.mode)
    if can.async_damping and config.async_damping == "none":
        return (
            "set MXKV_ASYNC_DAMPING=rate, the default (each asynchronous group's push "
            "moves the weights a whole step: rate lowers the servers' momentum to keep "
            "the script's rate per sample)"
        )
    if config.outer != "none":
        momentum = "the rule's" if config.outer_momentum is None else f"{config.outer_momentum:g}"
        return (
            f"lower MXKV_OUTER_MOMENTUM (now {momentum}) or MXKV_OUTER_LR (now "
            f"{config.outer_lr:g}): the outer step is lr / (1 - momentum) times the "
            "averaged change"
        )
    if can.local_steps:
        knobs = f"MXKV_TAU (now {config.tau})"
        if can.local_lr_scale:
            scale = "the rule's" if config.local_lr_scale is None else f"{config.local_lr_scale:g}"
            knobs += f" or MXKV_LOCAL_LR_SCALE (now {scale})"
        return f"lower {knobs}: the models drift apart between averages"
    return "lower the script's learning rate"


class DivergenceGuard:
    """Rank 0's watch over its training loss (see the module's docstring)."""

    def __init__(self, config: Config):
        self._advice = advice_for(config)
        self._fail = config.fail_on_divergence
        self._backwards = 0
        self._queued: Optional[mx.nd.NDArray] = None  # the last backward's mean loss
        self._readings: List[float] = []  # the window being filled
        self._first: Optional[float] = None  # the first window's median
        self._lowest = math.inf  # the lowest window median so far
        self.warned = False

    def record(self, heads: Sequence[mx.nd.NDArray]) -> None:
        """Called with the heads of each backward (the losses, one per device)."""
        if self.warned:
            return
        self._backwards += 1
        if self._queued is not None:
            self._read(float(self._queued.asscalar()))
        with mx.autograd.pause():
            means = [head.mean().as_in_context(mx.cpu()) for head in heads]
            self._queued = mx.nd.add_n(*means) / len(means) if means else None

    def _read(self, loss: float) -> None:
        if not math.isfinite(loss):
            self._diverged(f"rank 0's loss is {loss} at backward {self._backwards - 1}")
            return
        self._readings.append(loss)
        if len(self._readings) < WINDOW:
            return
        median = statistics.median(self._readings)
        self._readings = []
        log.debug(f"divergence guard: window median loss {median:.4g}")
        if self._first is None:
            self._first = median
        learned = self._lowest <= LEARNED * self._first
        self._lowest = min(self._lowest, median)
        if learned and median > UNLEARNED * self._first:
            self._diverged(
                f"rank 0's loss (median of {WINDOW} steps) fell to {self._lowest:.3g} and "
                f"is back at {median:.3g} by step {self._backwards - 1}, near where it "
                f"started ({self._first:.3g})"
            )

    def _diverged(self, what: str) -> None:
        self.warned = True
        message = f"mxkv_hybrid: training is diverging: {what}. To fix it, {self._advice}."
        if self._fail:
            raise DivergenceError(message + " (MXKV_FAIL_ON_DIVERGENCE=1 stopped the run)")
        log.warning(
            message + " The run goes on (MXKV_FAIL_ON_DIVERGENCE=1 stops it).", extra=TO_STDERR
        )


_watching: Optional[DivergenceGuard] = None  # rank 0's, once its store exists


def watch_with(guard: DivergenceGuard) -> None:
    """The guard that the backward hooks feed (the newest store's)."""
    global _watching
    _watching = guard


def stop_watching(guard: Optional[DivergenceGuard]) -> None:
    """A closed store's guard is fed no more."""
    global _watching
    if guard is not None and _watching is guard:
        _watching = None


def record_heads(heads) -> None:
    """The backward hooks' call: `heads` an NDArray or a list of them."""
    if _watching is not None:
        heads = heads if isinstance(heads, (list, tuple)) else [heads]
        _watching.record([h for h in heads if isinstance(h, mx.nd.NDArray)])

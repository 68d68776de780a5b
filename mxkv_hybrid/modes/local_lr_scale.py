"""MXKV_LOCAL_LR_SCALE: the local steps of lasgd (each rank's) and easgd (each group's) take
the gradients times a scale, which for SGD (with or without momentum) is its learning
rate's scale.

The script's learning rate is set for the batch of one allreduce over all K ranks (K x b
samples). Between two averages (lasgd) or elastic exchanges (easgd) a local model steps on
its own batch: b for a rank, g x b for a group of g ranks, 1 / M of all ranks' for M local
models. Unless MXKV_LOCAL_LR_SCALE is set, the rule applies the square-root scaling rule (a
learning rate in proportion to the square root of the batch: Krizhevsky 2014, "One weird
trick"; Hoffer et al. 2017, "Train longer, generalize better") to the batch a local model
trains on over a period: K x b while the exchanges come at most RULE_PERIOD steps apart,
less by RULE_PERIOD / tau for longer periods, never less than its own:

    scale = sqrt(max(1 / M, min(1, RULE_PERIOD / tau)))

RULE_PERIOD is the longest MXKV_TAU at which the script's learning rate held within a
point of allreduce on both tasks of examples/defaults_sweep.py "MXKV_TAU lasgd" before the
rule (commit e30755c; MNIST-1D at lr 0.1: tau 16 -0.2 points, tau 32 -4.9, tau 128 -21.9).
The sweep "MXKV_LOCAL_LR_SCALE" measures the rule against fixed scales.

easgd's groups are pulled towards the centre at every exchange, so they drift apart less
over a period: its rule takes ELASTIC_RULE_PERIOD instead. At tau 32 the script's rate
(x1) was within a point of allreduce where x0.71 (the rule with RULE_PERIOD) was short:
MNIST-1D 2 groups -0.2 against -2.1 points, digits 4 groups +0.3 against -1.6, MNIST-1D 4
groups +1.1 (alpha 0.2, seeds 42 1 2). At tau 128 with 4 groups the tasks pull apart:
MNIST-1D x0.5 -1.0, x0.61 -1.1, x0.71 -3.0; digits x0.5 -2.6, x0.61 -0.7, x0.71 -1.3;
48 steps gives x0.61 there (examples/benchmarks/results/easgd_local_scale)."""

import logging
import math
from typing import Optional, Sequence

from ..comm.collectives import Arrays, Key
from ..logs import TO_STDERR
from .averaging import Reducer

RULE_PERIOD = 16
ELASTIC_RULE_PERIOD = 48

log = logging.getLogger(__name__)


def rule_scale(tau: int, models: int, period: int = RULE_PERIOD) -> float:
    """MXKV_LOCAL_LR_SCALE's default for exchanges every `tau` steps between `models` local
    models (lasgd: the ranks, RULE_PERIOD; easgd: the groups, ELASTIC_RULE_PERIOD)."""
    return math.sqrt(max(1.0 / models, min(1.0, period / tau)))


def local_lr_scale(
    chosen: Optional[float],
    tau: int,
    models: int,
    announce: bool,
    of: str = "ranks",
    period: int = RULE_PERIOD,
) -> float:
    """The scale of the local steps' gradients: `chosen` (MXKV_LOCAL_LR_SCALE), else the
    rule's for `models` local models (`of`: ranks in lasgd, groups in easgd) and `period`,
    which rank 0 (`announce`) says at start where it is not 1."""
    if chosen is not None:
        return chosen
    scale = rule_scale(tau, models, period)
    if announce and scale != 1.0:
        log.info(
            f"mxkv_hybrid: the local steps take the gradients x{scale:.3g} (the script's "
            f"learning rate x{scale:.3g} under SGD) = sqrt(max(1 / {models} {of}, "
            f"min(1, {period} / MXKV_TAU {tau}))), MXKV_LOCAL_LR_SCALE's rule: the "
            "square-root scaling rule from the batch of all ranks to a local model's over a "
            "long period; set MXKV_LOCAL_LR_SCALE=1 to keep the script's",
            extra=TO_STDERR,
        )
    return scale


class Scaled:
    """A reducer whose results are times `scale`, in place: the local steps' gradients."""

    def __init__(self, reducer: Reducer, scale: float):
        self.reducer = reducer
        self.scale = scale

    def allreduce(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
    ) -> None:
        self.reducer.allreduce(op, keys, inputs, outputs, average)
        for results in outputs:
            for result in results:
                result *= self.scale


def scaled(reducer: Reducer, scale: float) -> Reducer:
    """`reducer`, its results times `scale` where that is not 1."""
    return reducer if scale == 1.0 else Scaled(reducer, scale)

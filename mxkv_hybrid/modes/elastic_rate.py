"""easgd's moving rate alpha where MXKV_EASGD_ALPHA is not set: a rule of the groups and of
MXKV_TAU.

EASGD's paper (Zhang, Choromanska, LeCun 2015) keeps beta = groups x alpha at 0.9
(MXKV_EASGD_BETA): the centre's synchronous move, c += alpha sum_g (x_g - c) = beta
(mean x - c), then never overshoots the groups' mean. With few groups that alpha pulls
each group hard towards a centre that lags it: 0.45 for 2 groups held MNIST-1D 1.5 points
below allreduce at the default tau 4 (examples/defaults_sweep.py MXKV_EASGD_ALPHA, seeds
42 1 2), where 0.1 came within a point with 2 and 4 groups at tau 4 and 16.

Over longer periods the same alpha is a weaker pull per step, and each group's model
drifts towards its own shard of the data: at tau 128 with 4 groups it ended at chance
(examples/defaults_sweep.py "MXKV_TAU easgd"). The rule keeps the pull per step of
ALPHA_CAP every RULE_PERIOD steps, up to LONG_CAP (0.9 ran away at tau 128 on MNIST-1D):

    alpha = min(LONG_CAP, min(ALPHA_CAP, beta / groups) x max(1, tau / RULE_PERIOD))

and synchronous EASGD (MXKV_EASGD_SYNC=1), whose centre moves by every group's pull at
once, keeps the paper's bound, alpha <= beta / groups."""

import logging
from typing import Optional

from ..logs import TO_STDERR
from .local_lr_scale import RULE_PERIOD

ALPHA_CAP = 0.1
LONG_CAP = 0.5

log = logging.getLogger(__name__)


def rule_alpha(beta: float, groups: int, tau: int, synchronous: bool = False) -> float:
    """MXKV_EASGD_ALPHA's default for `groups` groups exchanging every `tau` steps."""
    alpha = min(LONG_CAP, min(ALPHA_CAP, beta / groups) * max(1.0, tau / RULE_PERIOD))
    return min(alpha, beta / groups) if synchronous else alpha


def elastic_alpha(
    chosen: Optional[float],
    beta: float,
    groups: int,
    tau: int,
    synchronous: bool,
    announce: bool,
) -> float:
    """The moving rate: `chosen` (MXKV_EASGD_ALPHA), else the rule's, which rank 0
    (`announce`) says at start."""
    if chosen is not None:
        return chosen
    alpha = rule_alpha(beta, groups, tau, synchronous)
    if announce:
        bound = ", at most beta / groups (synchronous)" if synchronous else ""
        log.info(
            f"mxkv_hybrid: easgd's moving rate alpha {alpha:.3g} = min({LONG_CAP:g}, "
            f"min({ALPHA_CAP:g}, MXKV_EASGD_BETA {beta:g} / {groups} groups) x max(1, "
            f"MXKV_TAU {tau} / {RULE_PERIOD})){bound}, MXKV_EASGD_ALPHA's rule (the paper's "
            "beta / groups pulls few groups too hard to a lagging centre; longer periods "
            "need a stronger pull); set MXKV_EASGD_ALPHA to choose another",
            extra=TO_STDERR,
        )
    return alpha

"""easgd's moving rate alpha where MXKV_EASGD_ALPHA is not set: a rule of the groups.

EASGD's paper (Zhang, Choromanska, LeCun 2015) keeps beta = groups x alpha at 0.9
(MXKV_EASGD_BETA): the centre's synchronous move, c += alpha sum_g (x_g - c) = beta
(mean x - c), then never overshoots the groups' mean. With few groups that alpha pulls
each group hard towards a centre that lags it: 0.45 for 2 groups held MNIST-1D 1.5 points
below allreduce at the default tau 4 (examples/defaults_sweep.py MXKV_EASGD_ALPHA, seeds
42 1 2), where 0.1 came within a point with 2 and 4 groups. The rule caps alpha at
ALPHA_CAP and keeps the paper's bound beyond 9 groups:

    alpha = min(ALPHA_CAP, MXKV_EASGD_BETA / groups)"""

import logging
from typing import Optional

from ..logs import TO_STDERR

ALPHA_CAP = 0.1

log = logging.getLogger(__name__)


def rule_alpha(beta: float, groups: int) -> float:
    """MXKV_EASGD_ALPHA's default for `groups` groups."""
    return min(ALPHA_CAP, beta / groups)


def elastic_alpha(chosen: Optional[float], beta: float, groups: int, announce: bool) -> float:
    """The moving rate: `chosen` (MXKV_EASGD_ALPHA), else the rule's, which rank 0
    (`announce`) says at start."""
    if chosen is not None:
        return chosen
    alpha = rule_alpha(beta, groups)
    if announce:
        log.info(
            f"mxkv_hybrid: easgd's moving rate alpha {alpha:g} = min({ALPHA_CAP:g}, "
            f"MXKV_EASGD_BETA {beta:g} / {groups} groups), MXKV_EASGD_ALPHA's rule (the "
            "paper's beta / groups pulls few groups too hard to a lagging centre); set "
            "MXKV_EASGD_ALPHA to choose another",
            extra=TO_STDERR,
        )
    return alpha

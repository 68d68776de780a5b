"""MXKV_ASYNC_DAMPING=momentum: G groups that update one model asynchronously add about
1 - 1/G of momentum of their own (Mitliagkas et al., "Asynchrony begets momentum", 2016:
a gradient computed on weights that other groups have since moved acts as a delayed,
momentum-like term), so the servers' optimizer runs with its momentum less that much and
the sum stays about what the script asked for."""

import copy
from typing import Tuple

import mxnet as mx

from ..errors import MXKVError


def implicit_momentum(groups: int) -> float:
    """The momentum `groups` asynchronous groups add: 1 - 1/G (0 for one group)."""
    return 1.0 - 1.0 / groups


def has_momentum(optimizer: mx.optimizer.Optimizer) -> bool:
    """Whether `optimizer` has a momentum this damping can lower (SGD, NAG, ...)."""
    return isinstance(getattr(optimizer, "momentum", None), (int, float))


def with_async_momentum(
    optimizer: mx.optimizer.Optimizer, groups: int
) -> Tuple[mx.optimizer.Optimizer, str]:
    """A copy of `optimizer` for the servers, its momentum less implicit_momentum(groups)
    (never below 0), and a line saying so. Raises MXKVError for an optimizer without a
    momentum to lower."""
    if not has_momentum(optimizer):
        raise MXKVError(
            f"MXKV_ASYNC_DAMPING=momentum lowers the optimizer's momentum, and "
            f"{type(optimizer).__name__} has none: use MXKV_ASYNC_DAMPING=staleness "
            "or none"
        )
    momentum = float(optimizer.momentum)
    adjusted = copy.copy(optimizer)
    adjusted.momentum = max(0.0, momentum - implicit_momentum(groups))
    line = (
        f"the servers' {type(optimizer).__name__} runs with "
        f"momentum {adjusted.momentum:g} instead of {momentum:g} ({groups} groups updating "
        f"asynchronously add about 1 - 1/{groups} = {implicit_momentum(groups):g} of their "
        "own)"
    )
    return adjusted, line

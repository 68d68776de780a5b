"""The servers' momentum under G asynchronous groups.

MXKV_ASYNC_DAMPING=rate (auto, the default, where the optimizer's momentum is above 0): each group
pushes the mean gradient of its 1/G of a step's batch and the servers apply it at once, so
G pushes move the weights where one synchronous step of all ranks moves them once. Heavy-ball
SGD's effective rate is lr / (1 - m); keeping it per sample (the linear scaling rule from
the batch of all ranks, which the script's learning rate is set for, to one group's) gives
the servers 1 - m' = G (1 - m): 0.8 for 2 groups at the script's 0.9, 0.6 for 4. From 1 /
(1 - m) groups on (10 at 0.9) m' is 0 and each push is scaled by 1 / (G (1 - m)) instead.
A learning-rate schedule, which counts the steps of one rank, advances one step per G
pushes (StepsOfAllGroups): it would otherwise run G times too fast (as under MXNet's
dist_async) and end its warm-up and decay in 1/G of the epochs the script set.

MXKV_ASYNC_DAMPING=momentum: G groups that update one model asynchronously add about
1 - 1/G of momentum of their own (Mitliagkas et al., "Asynchrony begets momentum", 2016:
a gradient computed on weights that other groups have since moved acts as a delayed,
momentum-like term), so the servers' optimizer runs with its momentum less that much."""

import copy
from typing import Any, Callable, Tuple

import mxnet as mx

from ..errors import MXKVError


def implicit_momentum(groups: int) -> float:
    """The momentum `groups` asynchronous groups add: 1 - 1/G (0 for one group)."""
    return 1.0 - 1.0 / groups


def rate_keeping(momentum: float, groups: int) -> Tuple[float, float]:
    """(the servers' momentum, the scale of each push) that keep lr / (1 - momentum) per
    sample under `groups` asynchronous groups (MXKV_ASYNC_DAMPING=rate)."""
    servers = 1.0 - groups * (1.0 - momentum)
    if servers >= 0.0:
        return servers, 1.0
    return 0.0, 1.0 / (groups * (1.0 - momentum))


class StepsOfAllGroups:
    """The script's learning-rate schedule on the servers under `groups` asynchronous
    groups: G pushes (one of each group) are one step of the schedule."""

    def __init__(self, schedule: Callable[[int], float], groups: int) -> None:
        self.schedule, self.groups = schedule, groups

    def __call__(self, num_update: int) -> float:
        return self.schedule(num_update // self.groups)

    def __getattr__(self, name: str) -> Any:  # base_lr and the like: the schedule's
        if name == "schedule":  # (not set yet: while unpickling)
            raise AttributeError(name)
        return getattr(self.schedule, name)


def has_momentum(optimizer: mx.optimizer.Optimizer) -> bool:
    """Whether `optimizer` has a momentum this damping can lower (SGD, NAG, ...)."""
    return isinstance(getattr(optimizer, "momentum", None), (int, float))


def momentum_of(optimizer: mx.optimizer.Optimizer, damping: str) -> float:
    """`optimizer`'s momentum, which MXKV_ASYNC_DAMPING=`damping` sets on the servers;
    MXKVError for an optimizer without one."""
    if not has_momentum(optimizer):
        raise MXKVError(
            f"MXKV_ASYNC_DAMPING={damping} sets the optimizer's momentum, and "
            f"{type(optimizer).__name__} has none: use MXKV_ASYNC_DAMPING=staleness "
            "or none"
        )
    return float(optimizer.momentum)


def with_async_momentum(
    optimizer: mx.optimizer.Optimizer, groups: int
) -> Tuple[mx.optimizer.Optimizer, str]:
    """A copy of `optimizer` for the servers, its momentum less implicit_momentum(groups)
    (never below 0), and a line saying so. Raises MXKVError for an optimizer without a
    momentum to lower."""
    momentum = momentum_of(optimizer, "momentum")
    adjusted = copy.copy(optimizer)
    adjusted.momentum = max(0.0, momentum - implicit_momentum(groups))
    line = (
        f"the servers' {type(optimizer).__name__} runs with "
        f"momentum {adjusted.momentum:g} instead of {momentum:g} ({groups} groups updating "
        f"asynchronously add about 1 - 1/{groups} = {implicit_momentum(groups):g} of their "
        "own)"
    )
    return adjusted, line


def with_kept_rate(
    optimizer: mx.optimizer.Optimizer, groups: int
) -> Tuple[mx.optimizer.Optimizer, float, str]:
    """A copy of `optimizer` for the servers with rate_keeping's momentum, the scale of each
    push, and a line saying so. Raises MXKVError for an optimizer without a momentum."""
    momentum = momentum_of(optimizer, "rate")
    adjusted = copy.copy(optimizer)
    adjusted.momentum, scale = rate_keeping(momentum, groups)
    scheduled = ""
    if optimizer.lr_scheduler is not None and groups > 1:
        adjusted.lr_scheduler = StepsOfAllGroups(optimizer.lr_scheduler, groups)
        scheduled = f", its schedule one step per {groups} pushes"
    scaled = f" and each push times {scale:.3g}" if scale != 1.0 else ""
    line = (
        f"the servers' {type(optimizer).__name__} runs with momentum {adjusted.momentum:.3g} "
        f"instead of {momentum:g}{scaled}{scheduled} ({groups} groups each push the mean "
        f"gradient of 1/{groups} of a step's batch; 1 - m' = {groups} (1 - m) keeps the "
        "rate lr / (1 - m) per sample)"
    )
    return adjusted, scale, line

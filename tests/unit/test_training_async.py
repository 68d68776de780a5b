"""MXKV_ASYNC_DAMPING=rate and momentum (modes/async_momentum.py), in one process: the
servers' momentum is lowered for the groups' asynchrony, to no less than zero (rate then
scales each push), and an optimizer without momentum is refused naming the other damping."""

import mxnet as mx
import pytest

from mxkv_hybrid.errors import MXKVError
from mxkv_hybrid.modes.async_momentum import rate_keeping, with_async_momentum, with_kept_rate
from mxkv_hybrid.ps.by_value import dumps_for_servers, loads_on_server


def test_momentum_damping_never_goes_below_zero_and_refuses_an_optimizer_without_one():
    sgd = mx.optimizer.SGD(momentum=0.5)
    adjusted, _ = with_async_momentum(sgd, 4)  # 0.5 - 0.75
    assert adjusted.momentum == 0.0 and sgd.momentum == 0.5  # the script's own is kept
    with pytest.raises(MXKVError, match="Adam has none: use MXKV_ASYNC_DAMPING=staleness"):
        with_async_momentum(mx.optimizer.Adam(), 4)


@pytest.mark.parametrize(
    "groups,servers_momentum,scale", [(1, 0.9, 1.0), (2, 0.8, 1.0), (4, 0.6, 1.0), (20, 0.0, 0.5)]
)
def test_rate_keeping_keeps_lr_over_one_minus_momentum_per_sample(groups, servers_momentum, scale):
    """G pushes of the servers' rate scale / (1 - m') equal one step of the script's 1 / (1 -
    0.9): G scale / (1 - m') = 1 / 0.1; past 10 groups m' is 0 and the push scaled."""
    momentum, push_scale = rate_keeping(0.9, groups)
    assert momentum == pytest.approx(servers_momentum) and push_scale == pytest.approx(scale)
    assert groups * push_scale / (1 - momentum) == pytest.approx(1 / (1 - 0.9))


def test_rate_damping_copies_the_optimizer_and_refuses_one_without_momentum():
    sgd = mx.optimizer.SGD(momentum=0.9)
    adjusted, scale, line = with_kept_rate(sgd, 4)
    assert adjusted.momentum == pytest.approx(0.6) and sgd.momentum == 0.9 and scale == 1.0
    assert "momentum 0.6 instead of 0.9" in line
    with pytest.raises(MXKVError, match="Adam has none: use MXKV_ASYNC_DAMPING=staleness"):
        with_kept_rate(mx.optimizer.Adam(), 4)


def test_rate_damping_steps_the_schedule_once_per_push_of_every_group():
    """Under 2 groups the servers see 2 pushes per step of one rank: their copy of the
    schedule (sent pickled, as to the servers) gives at push 2 n what the script's gives at
    step n, so a warm-up or decay spans the epochs the script set. The script's own is
    unchanged."""
    schedule = mx.lr_scheduler.FactorScheduler(step=10, factor=0.5, base_lr=1.0)
    sgd = mx.optimizer.SGD(momentum=0.9, lr_scheduler=schedule)
    adjusted, _, line = with_kept_rate(sgd, 2)
    servers = loads_on_server(dumps_for_servers(adjusted)).lr_scheduler
    assert [servers(n) for n in (21, 23, 43)] == [1.0, 0.5, 0.25]  # the script's at 10, 11, 21
    assert "its schedule one step per 2 pushes" in line and sgd.lr_scheduler is schedule

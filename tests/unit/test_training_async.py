"""MXKV_ASYNC_DAMPING=momentum (modes/async_momentum.py), in one process: the servers'
momentum is lowered for the groups' asynchrony, to no less than zero, and an optimizer without
momentum is refused naming the other damping."""

import mxnet as mx
import pytest

from mxkv_hybrid.errors import MXKVError
from mxkv_hybrid.modes.async_momentum import with_async_momentum


def test_momentum_damping_never_goes_below_zero_and_refuses_an_optimizer_without_one():
    sgd = mx.optimizer.SGD(momentum=0.5)
    adjusted, _ = with_async_momentum(sgd, 4)  # 0.5 - 0.75
    assert adjusted.momentum == 0.0 and sgd.momentum == 0.5  # the script's own is kept
    with pytest.raises(MXKVError, match="Adam has none: use MXKV_ASYNC_DAMPING=staleness"):
        with_async_momentum(mx.optimizer.Adam(), 4)

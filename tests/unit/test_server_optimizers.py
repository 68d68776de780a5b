"""What the workers send the parameter servers (ps/by_value.py): an optimizer that cannot be
sent (its LR scheduler holds a lock) is refused on the worker, naming it."""

import threading

import mxnet as mx
import pytest

from mxkv_hybrid.errors import OptimizerNotSendable
from mxkv_hybrid.ps.by_value import dumps_for_servers


def test_what_cannot_be_sent_is_refused_naming_it():
    scheduler = mx.lr_scheduler.FactorScheduler(step=10)
    scheduler.lock = threading.Lock()
    optimizer = mx.optimizer.SGD(learning_rate=0.1, lr_scheduler=scheduler)
    with pytest.raises(
        OptimizerNotSendable, match=r"SGD .*cannot be sent to the parameter servers"
    ):
        dumps_for_servers(optimizer)

"""Optimizers that run inside MXNet's parameter servers (unpickled there: ps.server
imports this package before it starts serving; the user's optimizer inside travels by
value, by_value.py)."""

from typing import Optional

import mxnet as mx

from .by_value import dumps_for_servers, loads_on_server
from .coded_gradients import CODE_KEYS, CodeDecoder

# The servers' reserved keys, above any parameter index a Trainer uses (Module's string
# keys map to 0, 1, ...):
COUNTER_KEY = 2**30  # pushes counted
FINISH_KEY = COUNTER_KEY + 1  # separate group jobs: which groups are done, and their progress
AGREE_KEY = COUNTER_KEY + 2  # dist_sync: how many groups agreed
# The worker optimizer's learning rate and rescale_grad, one key per server: consecutive
# keys land on distinct servers (layout.server_of)
SETTINGS_KEYS = range(COUNTER_KEY + 2**10, COUNTER_KEY + 2**11)
# sync's fused chunks, below 2**31 / 9973, where MXNet's int arithmetic picking a key's
# server (key * 9973) overflows
CHUNK_KEYS = range(100_000, 2**31 // 9973)


def _is_reserved(index: int) -> bool:
    return (
        index in (COUNTER_KEY, FINISH_KEY, AGREE_KEY)
        or index in SETTINGS_KEYS
        or index in CHUNK_KEYS
        or index in CODE_KEYS
    )


class ServerOptimizer(mx.optimizer.Optimizer):
    """Applies `inner` to every parameter key. Reserved keys: COUNTER_KEY's weight counts
    the pushes the server received (+1 each; async leaders push 1 with every gradient and
    pull it with the weights: the difference between two pulls is the number of updates in
    between); FINISH_KEY adds what is pushed (a tally); a push to the server's key of
    SETTINGS_KEYS is [learning rate, rescale_grad] for its `inner` from now on (so a
    Trainer's set_learning_rate and a changed batch size reach the servers, whose optimizer
    is a pickled copy); AGREE_KEY and CHUNK_KEYS keep the sum of the pushes (dist_sync: what
    the groups sum through the servers, untouched by the optimizer). With `codes` (mode
    async's gradient compression, coded_gradients.py) a registration pushed to a weight
    registers its part here, and a push to a code key is decoded and applied to the part
    it names."""

    def __init__(self, inner: mx.optimizer.Optimizer, codes: Optional[CodeDecoder] = None):
        super().__init__()
        self.inner = inner
        self.codes = codes
        self.multi_precision = inner.multi_precision
        self.aggregate_num = 0  # one key per call, as the server applies them

    def __getstate__(self):
        """MXNet's pickle of this class (by reference), with the user's optimizer by value."""
        state = super().__getstate__()
        state["inner"] = dumps_for_servers(self.inner)
        return state

    def __setstate__(self, state):
        super().__setstate__(dict(state, inner=loads_on_server(state["inner"])))

    def create_state_multi_precision(self, index, weight):
        if _is_reserved(index):
            return None
        return self.inner.create_state_multi_precision(index, weight)

    def update_multi_precision(self, index, weight, grad, state):
        if index == COUNTER_KEY:
            weight += 1
        elif index == FINISH_KEY:
            weight += grad
        elif index == AGREE_KEY or index in CHUNK_KEYS:
            weight[:] = grad
        elif index in CODE_KEYS:
            assert self.codes is not None  # code keys are made only where codes are sent
            target, part, part_state, gradient = self.codes.gradient(index, grad)
            self.inner.update_multi_precision(target, part, gradient, part_state)
            part.wait_to_read()  # the server answers a pull of the part without waiting
        elif index in SETTINGS_KEYS:
            learning_rate, rescale_grad = (float(x) for x in grad.asnumpy())
            if self.inner.lr_scheduler is None:
                self.inner.lr = learning_rate
            self.inner.rescale_grad = rescale_grad
        elif (
            self.codes is not None
            and grad.stype == "default"
            and (code_key := self.codes.registration_of(grad)) is not None
        ):
            self.codes.register(code_key, index, weight, state)
        else:
            self.inner.update_multi_precision(index, weight, grad, state)

    def _set_current_context(self, device_id: int) -> None:
        self.inner._set_current_context(device_id)


class ElasticCentre(mx.optimizer.Optimizer):
    """The centre variable of elastic averaging: what a group pushes is the elastic
    difference e = alpha (x - centre), and the server adds it: centre += e."""

    def create_state(self, index, weight):
        return None

    def update(self, index, weight, grad, state):
        weight += grad

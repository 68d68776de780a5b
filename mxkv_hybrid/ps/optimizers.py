"""Optimizers that run inside MXNet's parameter servers (unpickled there: ps.server
imports this package before it starts serving)."""
import mxnet as mx

COUNTER_KEY = 2 ** 30  # above any parameter index a Trainer uses; Module's string keys map to 0..
FINISH_KEY = COUNTER_KEY + 1  # separate group jobs: which groups are done, and their progress


class CountingOptimizer(mx.optimizer.Optimizer):
    """Applies `inner` to every key except COUNTER_KEY, whose weight counts the pushes the
    server received (+1 each), and FINISH_KEY, which adds what is pushed. Leaders push 1 to
    COUNTER_KEY with every gradient and pull it with the weights: the difference between
    two pulls is the number of updates in between."""

    def __init__(self, inner: mx.optimizer.Optimizer):
        super().__init__()
        self.inner = inner
        self.multi_precision = inner.multi_precision
        self.aggregate_num = 0  # one key per call, as the server applies them

    def create_state_multi_precision(self, index, weight):
        if index in (COUNTER_KEY, FINISH_KEY):
            return None
        return self.inner.create_state_multi_precision(index, weight)

    def update_multi_precision(self, index, weight, grad, state):
        if index == COUNTER_KEY:
            weight += 1
        elif index == FINISH_KEY:  # a tally: what is pushed is added
            weight += grad
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

"""A library that, as gluoncv and gluonnlp do, checks MXNet's version when it is imported,
and offers an LR scheduler. A parameter server that unpickles the scheduler imports this
package: it must have imported MXNet whole first (a ps-lite node that serves from inside
`import mxnet` has no `mxnet.__version__` yet)."""

import mxnet as mx

try:
    MXNET_VERSION = mx.__version__
except AttributeError:  # (as gluoncv's check fails there)
    raise ImportError(
        "version_checked: unable to import modules due to a missing (half-imported) mxnet"
    ) from None


class HalvingScheduler(mx.lr_scheduler.LRScheduler):
    """The base learning rate, halved every `every` updates."""

    def __init__(self, every: int, base_lr: float):
        super().__init__(base_lr=base_lr)
        self.every = every

    def __call__(self, num_update: int) -> float:
        return self.base_lr * 0.5 ** (num_update // self.every)

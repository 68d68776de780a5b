"""Explicit model averaging for people who want control, shaped like PyTorch's
PeriodicModelAverager: train with a local store (kvstore=None or 'local'), call
`average_parameters` after every `trainer.step`.

    mxkv_hybrid.broadcast_parameters(net.collect_params())      # same start everywhere
    averager = mxkv_hybrid.PeriodicModelAverager(period=4, warmup_steps=100)
    for batch in data:
        ...
        trainer.step(batch_size)
        averager.average_parameters(net.collect_params())

Unlike PyTorch's, a step counts once the optimizer has run: the first average follows
step warmup_steps + period (PyTorch's averages at step warmup_steps already). With
overlap=True the average travels while the next `period` steps compute (mode lasgd's
algorithm, see local_sgd.py); `consensus` then gives every rank the same model. With
fragments=P the model is cut into P fragments, and one is averaged every period / P steps
(Streaming DiLoCo: each exchange sends 1/P of the model). The averages are plain and in
float32 (MXKV_OUTER and MXKV_COMPRESS are mode lasgd's)."""

import warnings
from dataclasses import replace
from typing import Iterable, List, Tuple, Union

import mxnet as mx
from mxnet import gluon

from ..comm.collectives import TensorCollectives
from ..comm.topology import world
from ..config import Config
from ..errors import MXKVError
from .local_sgd import LocalSGD

Parameters = Union[gluon.ParameterDict, Iterable[gluon.Parameter]]


def _as_list(params: Parameters) -> List[gluon.Parameter]:
    return list(params.values()) if isinstance(params, gluon.ParameterDict) else list(params)


def _keys_and_weights(params: Parameters) -> Tuple[List[str], List[List[mx.nd.NDArray]]]:
    trained = [p for p in _as_list(params) if p.grad_req != "null"]
    return [p.name for p in trained], [p.list_data() for p in trained]


def broadcast_parameters(params: Parameters, root: int = 0) -> None:
    """Collective: every rank's parameters (all of them) become rank `root`'s. Raises
    MXKVError naming the parameters whose shapes are not known yet (deferred)."""
    items = _as_list(params)
    deferred = [p.name for p in items if p._deferred_init]
    if deferred:
        raise MXKVError(
            f"broadcast_parameters: {len(deferred)} parameter(s) have no shape yet (deferred "
            f"initialization: {', '.join(deferred[:3])}{', ...' if len(deferred) > 3 else ''}): "
            "run one batch through the network first (net(x)), or give the layers their input "
            "sizes (in_units / in_channels), then broadcast"
        )
    data = [p.list_data() for p in items]
    TensorCollectives(world().comm, Config.from_environment()).broadcast(
        "broadcast_parameters", [p.name for p in items], [d[:1] for d in data], data, root
    )


class PeriodicModelAverager:
    """Averages the parameters over all ranks every `period` steps after `warmup_steps`."""

    def __init__(
        self, period: int, warmup_steps: int = 0, overlap: bool = False, fragments: int = 1
    ):
        if not isinstance(period, int) or period < 1:
            raise ValueError(f"period must be a whole number >= 1, got {period!r}")
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be a whole number >= 0, got {warmup_steps!r}")
        if period == 1 and not overlap:
            warnings.warn(
                "period=1 averages the whole model after every step, which costs at "
                "least as much as averaging the gradients: use kvstore='hybrid' "
                "(MXKV_MODE=allreduce) instead",
                stacklevel=2,
            )
        if not isinstance(fragments, int) or fragments < 1 or period % fragments:
            raise ValueError(
                f"fragments must be a whole number >= 1 that divides period "
                f"{period}, got {fragments!r}"
            )
        plain = replace(
            Config.from_environment(), outer="none", compress="none", local_lr_scale=1.0
        )
        self._schedule = LocalSGD(
            plain,
            world(),
            period=period,
            warmup_steps=warmup_steps,
            overlap=bool(overlap),
            fragments=fragments,
        )

    @property
    def period(self) -> int:
        return self._schedule.period

    @property
    def warmup_steps(self) -> int:
        return self._schedule.warmup_steps

    @property
    def step(self) -> int:
        """Calls of average_parameters so far (optimizer steps)."""
        return self._schedule.steps

    @property
    def averagings(self) -> int:
        return self._schedule.rounds

    def average_parameters(self, params: Parameters) -> bool:
        """Collective: counts a step; on the schedule, averages. Returns whether it did."""
        return self._schedule.after_step(*_keys_and_weights(params))

    def consensus(self, params: Parameters) -> None:
        """Collective: applies an average in flight, then averages at once."""
        self._schedule.consensus(*_keys_and_weights(params))

    def state(self) -> dict:
        return self._schedule.state()

    def load_state(self, state: dict) -> None:
        self._schedule.load_state(state)

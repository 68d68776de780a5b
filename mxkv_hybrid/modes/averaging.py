"""What the averaging modes (easgd, lasgd) offer the store, the hooks and checkpoints."""

from typing import Callable, Protocol, Sequence

import mxnet as mx

from ..comm.collectives import Arrays, Key, TensorCollectives
from ..comm.compression_params import Compression
from ..errors import MXKVError


class Reducer(Protocol):
    """What sums (or averages) values over ranks: TensorCollectives, QuantisedReducer,
    lasgd's DeviceSum, the averaging modes and GroupedSync, as the store's reducer."""

    def allreduce(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
    ) -> None: ...


class Averaging(Protocol):
    """Counts optimizer steps and, on its schedule, moves the weights towards the other
    ranks' (ElasticAveraging, LocalSGD)."""

    steps: int  # optimizer steps counted so far
    rounds: int  # elastic exchanges / model averagings so far

    def register(self, keys: Sequence[Key], weights: Sequence[mx.nd.NDArray]) -> None: ...

    def compress_gradients(self, compression: Compression) -> None: ...

    def after_step(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> bool: ...

    def consensus(self, keys: Sequence[Key], weights: Sequence[Arrays]) -> None: ...

    def state(self) -> dict: ...

    def load_state(self, state: dict) -> None: ...

    def close(self) -> None: ...


def check_state_mode(state: dict, mode: str) -> None:
    """Refuses an averaging state saved by another mode."""
    if state.get("mode") != mode:
        raise MXKVError(
            f"this averaging state was saved in mode {state.get('mode')!r}, and this "
            f"job runs MXKV_MODE={mode}: resume with the mode it was saved in"
        )


def check_saved_with(state: dict, entry: str, here: bool, mode: str, setting: str) -> None:
    """Refuses a state saved with `setting` (its `entry` not None) where this job runs
    without it, or the other way round."""
    if (state.get(entry) is not None) != here:
        raise MXKVError(
            f"{mode}: this checkpoint was written {'without' if here else 'with'} "
            f"{setting}; resume with the same setting"
        )


def allreduce_split(
    op: str,
    keys: Sequence[Key],
    inputs: Sequence[Arrays],
    outputs: Sequence[Arrays],
    average: bool,
    is_weight: Callable[[Key], bool],
    weights: Reducer,
    others: TensorCollectives,
) -> None:
    """The averaging modes' reduction: the keys of weights (their gradients) through
    `weights`, every other key (metrics) through `others`."""
    for reducer, wanted in ((weights, True), (others, False)):
        chosen = [i for i, k in enumerate(keys) if is_weight(k) == wanted]
        if chosen:
            reducer.allreduce(
                op,
                [keys[i] for i in chosen],
                [inputs[i] for i in chosen],
                [outputs[i] for i in chosen],
                average,
            )

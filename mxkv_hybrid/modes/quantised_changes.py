"""lasgd's model averages in 1-bit codes (MXKV_COMPRESS=1bit), as 1-bit SGD quantises
gradients and SparseLoCo its outer gradients: each rank sends its change since the model
every rank last shared (the anchor) as a sign a value and, per 256 values, the mean of each
sign's values (csrc/one_bit.h, 1.25 bits a value), with error feedback:

    d = anchor - x
    c = codes of d + r           (r: what the codes of this piece left out so far)
    r = d + r - decoded(c)
    mean(x) = anchor - mean(decoded(c))   (every rank gathers every rank's codes and sums
                                           them in the same order: the same bits everywhere)

The residual r lives beside the collectives' quantiser (csrc/quantised_allreduce.cpp), one
per piece of the model, and is in the checkpoint. float32 pieces only; others travel as
they are."""

from typing import Sequence, Set

import mxnet as mx

from ..comm.collectives import Key, TensorCollectives
from ..comm.compression import QuantisedReducer
from ..comm.compression_params import DEFAULT_THRESHOLD, Compression
from .rounded_deltas import RoundedDeltas, check_compress

COMPRESS = "1bit"


class QuantisedChanges:
    """The 1-bit exchange of lasgd's averages, the residuals kept by `collectives`."""

    compress = COMPRESS
    # the residuals are the averages' collectives' own: consensus averages there too
    residuals_in_collectives = True

    def __init__(self, collectives: TensorCollectives):
        self._collectives = collectives
        self._names: Set[Key] = set()  # pieces with a residual

    def changes(
        self,
        names: Sequence[Key],
        anchors: Sequence[mx.nd.NDArray],
        models: Sequence[mx.nd.NDArray],
        into: Sequence[mx.nd.NDArray],
    ) -> None:
        """into[i] = d of piece names[i], anchor - model (the quantiser adds r)."""
        for anchor, model, out in zip(anchors, models, into):
            out[:] = anchor - model.as_in_context(anchor.context)

    def average(
        self, collectives: TensorCollectives, names: Sequence[Key], changes: Sequence[list]
    ) -> None:
        """changes[i] (each rank's d) becomes the mean of the ranks' decoded codes."""
        self._names.update(names)
        QuantisedReducer(collectives, Compression(COMPRESS, DEFAULT_THRESHOLD)).allreduce(
            "model averaging", names, changes, changes, average=True
        )

    models = staticmethod(RoundedDeltas.models)

    def state(self) -> dict:
        return {
            "compress": COMPRESS,
            "residual": {name: self._collectives.quantiser_residual(name) for name in self._names},
        }

    def load_state(self, state: dict) -> None:
        check_compress(state, COMPRESS)
        for name, residual in state["residual"].items():
            self._collectives.set_quantiser_residual(name, residual)
        self._names = set(state["residual"])

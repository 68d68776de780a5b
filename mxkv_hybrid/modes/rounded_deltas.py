"""lasgd's model averages in 16 bits (MXKV_COMPRESS=fp16|bf16) with error feedback, as
Streaming DiLoCo quantises its outer gradients. Rounding the weights themselves would
cost about 1e-3 of each weight (fp16; bf16 1e-2) at every average; instead each rank
sends its change since the model every rank last shared (the anchor):

    d = anchor - x + r           (r: what rounding left out of this rank's last d)
    r = d - round16(d)           (error feedback: sent with the next change)
    mean(x) = anchor - mean(d)   (the collectives send d in 16 bits, sum in float32)

so the rounding error is relative to the change, not to the weight, and does not
accumulate. float32 weights only; other dtypes travel as they are."""

from typing import Dict, Sequence

import mxnet as mx
import numpy as np

from ..comm.collectives import Key, TensorCollectives
from ..errors import MXKVError


def round_to_16_bits(values: np.ndarray, compress: str) -> np.ndarray:
    """float32 values rounded to float16 (fp16) or bfloat16 (bf16), to nearest even, as
    the collectives' kernels round them on the wire; back in float32."""
    if compress == "fp16":
        return values.astype(np.float16).astype(np.float32)
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return np.where(np.isnan(values), values, rounded.view(np.float32))


def check_compress(state: dict, compress: str) -> None:
    """Refuses a checkpoint's changes written under another MXKV_COMPRESS."""
    if state["compress"] != compress:
        raise MXKVError(
            f"lasgd: this checkpoint was written with MXKV_COMPRESS={state['compress']}, "
            f"and this job has {compress}: resume with the same setting"
        )


class RoundedDeltas:
    """Each rank's residual r of every piece of the model it averages."""

    residuals_in_collectives = False  # (kept here: any blocking collective can send d)

    def __init__(self, compress: str):
        self.compress = compress
        self._residual: Dict[Key, np.ndarray] = {}

    def changes(
        self,
        names: Sequence[Key],
        anchors: Sequence[mx.nd.NDArray],
        models: Sequence[mx.nd.NDArray],
        into: Sequence[mx.nd.NDArray],
    ) -> None:
        """into[i] = d of piece names[i] (anchor - model + r); keeps the new r."""
        for name, anchor, model, out in zip(names, anchors, models, into):
            change = (anchor - model.as_in_context(anchor.context)).asnumpy()
            if change.dtype == np.float32:  # other dtypes travel as they are
                change += self._residual.get(name, 0.0)
                self._residual[name] = change - round_to_16_bits(change, self.compress)
            out[:] = mx.nd.array(change, ctx=out.context, dtype=change.dtype)

    @staticmethod
    def average(
        collectives: TensorCollectives, names: Sequence[Key], changes: Sequence[list]
    ) -> None:
        """changes[i] (each rank's d) becomes the mean of the ranks' d, sent in 16 bits by
        `collectives` (MXKV_COMPRESS sets their wire type)."""
        collectives.allreduce("model averaging", names, changes, changes, average=True)

    @staticmethod
    def models(anchors: Sequence[mx.nd.NDArray], averaged: Sequence[mx.nd.NDArray]) -> None:
        """averaged[i] (the mean of the ranks' d) becomes the mean model, anchor - mean(d)."""
        for anchor, mean in zip(anchors, averaged):
            mean[:] = anchor.as_in_context(mean.context) - mean

    def state(self) -> dict:
        return {"compress": self.compress, "residual": dict(self._residual)}

    def load_state(self, state: dict) -> None:
        check_compress(state, self.compress)
        self._residual = dict(state["residual"])

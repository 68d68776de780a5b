"""Arrays on a device other than `cpu` (a GPU; `mx.cpu_pinned` in tests) reach the C++
collectives, which touch host memory only, through pinned host buffers.

Before a collective, MXNet's own copy (`copyto`, an engine operation: ordered after the
backward pass that writes the gradient, and overlapping with the rest of it) brings each
device array into a pinned buffer kept for its key and device. The C++ collective then
sums a process's per-device buffers into its fused bucket and reduces across ranks,
exactly as it does for `cpu` arrays, into one pinned result buffer; engine copies take
the result back to every output device. Arrays already on `cpu` are used in place."""

import ctypes
from typing import Callable, Dict, List, Sequence, Tuple

import mxnet as mx
import numpy as np
from mxnet.base import _LIB, check_call

Arrays = Sequence[mx.nd.NDArray]
_CPU = mx.Context.devstr2type["cpu"]


def on_host(array: mx.nd.NDArray) -> bool:
    """Whether the collectives may use this array's memory in place (context `cpu`). Asks
    MXNet's C API for the device type only: `array.context` builds a Context object, which
    cost 0.4 ms per step for ResNet-50's 193 gradients and their outputs."""
    device_type, device_id = ctypes.c_int(), ctypes.c_int()
    check_call(
        _LIB.MXNDArrayGetContext(array.handle, ctypes.byref(device_type), ctypes.byref(device_id))
    )
    return device_type.value == _CPU


def _nothing_to_copy_back() -> None:
    """The copy back of a collective whose arrays are all on `cpu`."""


class DeviceStaging:
    """The pinned buffers of one TensorCollectives, allocated once per key and device."""

    def __init__(self):
        self._buffers: Dict[tuple, mx.nd.NDArray] = {}
        self.staged_bytes = 0  # copied between devices and pinned buffers, both ways

    def stage(
        self,
        keys: Sequence,
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        read_inputs: bool = True,
    ) -> Tuple[List[Arrays], List[Arrays], Callable[[], None]]:
        """(inputs, outputs) with every non-cpu array replaced by a pinned buffer (inputs
        copied into theirs now, unless `read_inputs` is False: a broadcast's non-root), and
        what copies the results back to the output devices once the collective ran."""
        if all(on_host(a) for arrays in (*inputs, *outputs) for a in arrays):
            return list(inputs), list(outputs), _nothing_to_copy_back  # the usual case
        host_inputs: List[Arrays] = []
        host_outputs: List[Arrays] = []
        copies_back = []
        for key, ins, outs in zip(keys, inputs, outputs):
            staged_ins = [
                self._copy_in(key, i, a) if read_inputs and not on_host(a) else a
                for i, a in enumerate(ins)
            ]
            host_inputs.append(staged_ins)
            if all(on_host(o) for o in outs):
                host_outputs.append(outs)
                continue
            staged = [s for s, a in zip(staged_ins, ins) if s is not a]
            result = staged[0] if staged else self._buffer((key, "out"), outs[0])
            host_outputs.append([result])
            copies_back.append((result, outs))
        return host_inputs, host_outputs, lambda: self._copy_back(copies_back)

    def _copy_in(self, key, index: int, array: mx.nd.NDArray) -> mx.nd.NDArray:
        buffer = self._buffer((key, "in", index), array)
        array.copyto(buffer)
        self.staged_bytes += _nbytes(array)
        return buffer

    def _copy_back(self, copies: List[Tuple[mx.nd.NDArray, Arrays]]) -> None:
        for result, outs in copies:
            for out in outs:
                result.copyto(out)
                self.staged_bytes += _nbytes(out)

    def _buffer(self, slot: tuple, like: mx.nd.NDArray) -> mx.nd.NDArray:
        """The pinned buffer of `slot` shaped like `like`, on the pinned memory of its device."""
        ident = (slot, like.shape, like.dtype, like.context.device_id)
        buffer = self._buffers.get(ident)
        if buffer is None:
            buffer = mx.nd.empty(
                like.shape, ctx=mx.cpu_pinned(like.context.device_id), dtype=like.dtype
            )
            self._buffers[ident] = buffer
        return buffer


def _nbytes(array: mx.nd.NDArray) -> int:
    return array.size * np.dtype(array.dtype).itemsize

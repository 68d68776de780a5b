"""Mode async's gradient compression (set_gradient_compression), as MXNet's dist_async
does it with 2-bit codes: each group leader quantises its group's gradient of every dense
float32 weight, the residual kept per group (error feedback), and pushes the codes; the
server holding each part of the weight decodes them and applies its optimizer at once.

A weight's part on a server is where MXNet puts it (layout.parts_of); the codes of a part
travel under a key of their own (CODE_KEYS) that lands on the same server, created with
the weight. Once the servers have the optimizer, each leader registers every coded weight:
it pushes the weight key an array of zeros but for each part's first value, the part's
code key. The servers' optimizer (ServerOptimizer) takes a dense push of that form as a
registration, not as a gradient (a gradient of exactly that form, a whole number between
60000 and 100000 first and zeros elsewhere, would be taken for one too), and keeps the
part's storage and state for its code key. The codes are csrc/code_sums.h's
words for one group: 2bit, 15 values a float32 word (base 3 digits); 1bit, a sign a value
and each sign's mean per 256 values (40 bytes per 256 values).
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from mxnet import ndarray as nd  # (mx.nd is not there yet on a server: see ps/server.py)

from ..comm.compression_params import Compression
from ..comm.extension import extension_without_mpi
from ..errors import MXKVError
from .layout import keys_for_server, parts_of

CODE_KEYS = range(60_000, 100_000)  # below the chunk keys of mode sync (optimizers.CHUNK_KEYS)


@dataclass(frozen=True)
class CodedPart:
    """The part of a weight one server keeps, and the key its codes travel under."""

    weight: int  # the weight's server key
    code_key: int
    start: int  # the part's elements in the weight
    stop: int
    words: int  # float32 words of its codes


def code_words(compression: Compression, values: int) -> int:
    """float32 words the codes of `values` values take (one group's; on an MPI rank)."""
    from ..comm import _C as kernels

    if compression.type == "2bit":
        return -(-values // kernels.digits_per_word(1))
    return kernels.one_bit_slot_words(values)


def plan_codes(
    sizes: Dict[int, int], compression: Compression, num_servers: int, bound: int, first_key: int
) -> List[CodedPart]:
    """The parts of weights of `sizes` elements (by server key), each with a code key
    >= first_key on its server. Raises when a part's codes would reach `bound` (MXNet
    would split them over the servers, away from the part)."""
    planned: List[CodedPart] = []
    next_key = first_key
    for weight, size in sorted(sizes.items()):
        for part in parts_of(weight, size, num_servers, bound):
            words = code_words(compression, part.stop - part.start)
            if words >= bound:
                raise MXKVError(
                    f"set_gradient_compression: key {weight} ({size} values) keeps "
                    f"{part.stop - part.start} on one parameter server, whose codes ({words} "
                    f"words) would reach MXNET_KVSTORE_BIGARRAY_BOUND={bound}, and MXNet would "
                    "split them over the servers: start more servers (--servers), or "
                    "train without compression"
                )
            code_key = next(keys_for_server(part.server, num_servers, next_key))
            if code_key not in CODE_KEYS:
                raise MXKVError(
                    "set_gradient_compression: more weight parts than code keys "
                    f"({len(CODE_KEYS)}); train without compression"
                )
            next_key = code_key + 1
            planned.append(CodedPart(weight, code_key, part.start, part.stop, words))
    return planned


class GradientCoder:
    """A group leader's half: the code keys of its weights, and the codes it pushes."""

    def __init__(self, compression: Compression):
        self.compression = compression
        self.parts: Dict[int, List[CodedPart]] = {}  # weight key: its parts
        self._residuals: Dict[int, np.ndarray] = {}
        self._shapes: Dict[int, Tuple[int, ...]] = {}
        self._words: Dict[int, nd.NDArray] = {}  # code key: the words pushed
        from ..comm import _C as kernels  # a group leader: an MPI rank

        if compression.type == "2bit":
            self._pack = lambda values, residual, words: kernels.pack_2bit_digits(
                values, residual, compression.threshold, 1, words
            )
        else:
            self._pack = lambda values, residual, words: kernels.pack_1bit_slot(
                values, residual, 0, 1, words
            )

    def add(
        self, shapes: Dict[int, Tuple[int, ...]], num_servers: int, bound: int
    ) -> List[CodedPart]:
        """Plans the codes of new weights (server key: shape); returns their parts."""
        next_key = max(
            (p.code_key + 1 for ps in self.parts.values() for p in ps), default=CODE_KEYS.start
        )
        sizes = {weight: int(np.prod(shape)) for weight, shape in shapes.items()}
        planned = plan_codes(sizes, self.compression, num_servers, bound, next_key)
        for part in planned:
            self.parts.setdefault(part.weight, []).append(part)
            self._words[part.code_key] = nd.zeros((part.words,))
        self._shapes.update(shapes)
        for weight, size in sizes.items():
            self._residuals[weight] = np.zeros(size, np.float32)
        return planned

    def registration(self, weight: int) -> nd.NDArray:
        """What a leader pushes to `weight` to register it: each part's code key at the
        part's first value, zeros elsewhere (shaped as the weight: MXNet's worker keeps
        one buffer a key for pushes and pulls)."""
        values = np.zeros(self._residuals[weight].size, np.float32)
        for part in self.parts[weight]:
            values[part.start] = part.code_key
        return nd.array(values.reshape(self._shapes[weight]))

    def residual(self, weight: int) -> np.ndarray:
        """What quantisation has not sent yet of this group's gradients of `weight`."""
        return self._residuals[weight]

    def encode(
        self, weights: Sequence[int], gradients: Sequence[nd.NDArray]
    ) -> Tuple[List[int], List[nd.NDArray]]:
        """(code keys, their words) for the gradients of `weights` (residuals updated)."""
        keys, words = [], []
        for weight, gradient in zip(weights, gradients):
            flat = gradient.reshape((-1,))
            for part in self.parts[weight]:
                out = self._words[part.code_key]
                values = flat[part.start : part.stop]  # held: the kernel reads it by handle
                self._pack(
                    values.handle.value,
                    self._residuals[weight][part.start : part.stop],
                    out.handle.value,
                )
                keys.append(part.code_key)
                words.append(out)
        return keys, words


class CodeDecoder:
    """The servers' half, pickled with their optimizer: keeps each registered part, and
    decodes its codes into a gradient."""

    def __init__(self, compression: Compression):
        self.compression = compression
        self._targets: Dict[int, Tuple[int, nd.NDArray, object]] = {}
        self._decoded: Dict[int, nd.NDArray] = {}

    def __getstate__(self):
        return {**self.__dict__, "_targets": {}, "_decoded": {}}

    @staticmethod
    def registration_of(pushed: nd.NDArray) -> Optional[int]:
        """The code key a dense push to a weight registers, if it is a registration: a code
        key at its first value, zeros elsewhere; else None. (Not its dtype: MXNet 1.9.1's
        servers leave their multi_precision_ flag uninitialised, and where it happens to
        be true they hand float16 pushes over as float32 copies; seen.) A gradient's first
        value alone almost always answers, without reading the rest."""
        flat = pushed.reshape((-1,))
        if flat.size == 0:
            return None
        first = float(flat[0:1].asnumpy()[0])
        if not (first.is_integer() and int(first) in CODE_KEYS) or flat[1:].asnumpy().any():
            return None
        return int(first)

    def register(self, code_key: int, weight: int, part: nd.NDArray, state) -> None:
        """This server's part of `weight` (its storage and optimizer state), which the
        codes under `code_key` update."""
        self._targets[code_key] = (weight, part, state)

    def gradient(
        self, code_key: int, words: nd.NDArray
    ) -> Tuple[int, nd.NDArray, object, nd.NDArray]:
        """(weight key, its part here, the part's state, the decoded gradient)."""
        if code_key not in self._targets:
            raise MXKVError(
                f"parameter server: codes under key {code_key} before their "
                "weight's registration (a leader pushes it after set_optimizer)"
            )
        weight, part, state = self._targets[code_key]
        decoded = self._decoded.get(code_key)
        if decoded is None:
            decoded = self._decoded[code_key] = nd.empty(part.shape, dtype=np.float32)
        kernels = extension_without_mpi()
        if self.compression.type == "2bit":
            kernels.unpack_2bit_digit_sums(
                words.handle.value, self.compression.threshold, 1, 1.0, decoded.handle.value
            )
        else:
            kernels.unpack_1bit_slots(words.handle.value, 1, 1.0, decoded.handle.value)
        return weight, part, state, decoded

"""What set_gradient_compression takes, checked (Compression), in a module of its own that
imports nothing of MXNet: the parameter servers unpickle it (mode async's codes) inside
MXNet's own import, where most of MXNet is not there yet."""

from dataclasses import dataclass

from ..errors import MXKVError

DEFAULT_THRESHOLD = 0.5  # MXNet's
KINDS = {"2bit": 0, "1bit": 1}  # csrc/quantiser.h's Quantiser::Kind


@dataclass(frozen=True)
class Compression:
    """A compression_params dict, checked: its type and (2bit) threshold."""

    type: str
    threshold: float


def parse_compression(params: dict) -> Compression:
    """MXNet's compression_params -> Compression; a clear error for anything else."""
    if not isinstance(params, dict) or "type" not in params:
        raise MXKVError(
            "set_gradient_compression takes a dict with a 'type', e.g. "
            "{'type': '2bit', 'threshold': 0.5}"
        )
    kind = params["type"]
    allowed = {"type", "threshold"} if kind == "2bit" else {"type"}
    if kind not in KINDS or set(params) - allowed:
        raise MXKVError(
            f"set_gradient_compression: {params!r}: the hybrid kvstore takes "
            "MXNet's {'type': '2bit', 'threshold': t} (t > 0, default 0.5) or "
            "{'type': '1bit'} (a sign a value, and each sign's mean per 256 values)"
        )
    threshold = float(params.get("threshold", DEFAULT_THRESHOLD))
    if not threshold > 0:
        raise MXKVError(f"set_gradient_compression: threshold {threshold} must be above 0")
    return Compression(kind, threshold)

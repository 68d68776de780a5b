"""Every MXKV_* knob: parsed and validated once, from the environment."""
import os
from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional

from .errors import ConfigError

MODES = ("allreduce", "sync", "async")


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


def _parse_mode(text: str) -> str:
    mode = text.strip().lower()
    if mode not in MODES:
        raise ValueError("expected one of: " + ", ".join(MODES))
    return mode


def _parse_group_size(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("expected 0 (one group per host) or a positive number of ranks")
    return value


def _parse_seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("expected a positive number of seconds")
    return value


def _parse_bucket_mb(text: str) -> float:
    value = float(text)
    if not 0.001 <= value <= 1024:
        raise ValueError("expected a size in MiB between 0.001 and 1024")
    return value


@dataclass(frozen=True)
class Knob:
    """One environment variable: its parser, default and one-line documentation."""

    parse: Callable[[str], object]
    default: str
    doc: str


KNOBS: Dict[str, Knob] = {
    "MXKV_MODE": Knob(_parse_mode, "allreduce",
                      "How gradients are combined. allreduce: one MPI allreduce over all ranks. "
                      "sync: allreduce inside each group, group leaders sum through MXNet's "
                      "parameter server (dist_sync), then a broadcast inside each group. async: the "
                      "same groups, asynchronous to each other: the servers (dist_async) hold "
                      "the weights and apply each group's gradient as it arrives."),
    "MXKV_GROUP_SIZE": Knob(_parse_group_size, "0",
                            "Ranks per group in the modes sync and async: 0 puts the ranks of one host in "
                            "one group; N makes groups of N consecutive ranks (the last may be "
                            "smaller)."),
    "MXKV_PS_TIMEOUT": Knob(_parse_seconds, "60",
                            "Seconds a group leader waits for the parameter server (connecting, "
                            "or one push/pull) before it ends the job with an error."),
    "MXKV_BUCKET_MB": Knob(_parse_bucket_mb, "1",
                           "Fusion bucket size in MiB: smaller arrays are packed together up to this "
                           "size; larger ones are reduced in place in chunks of this size."),
    "MXKV_AVERAGE": Knob(_parse_bool, "1",
                         "1: gradients are averaged over ranks (a script written for one process "
                         "trains on the union of the batches). 0: summed, like MXNet's dist_sync."),
}


@dataclass(frozen=True)
class Config:
    """The validated settings of one process."""

    mode: str
    bucket_bytes: int
    average: bool
    group_size: int
    ps_timeout: float

    @classmethod
    def from_environment(cls, environ: Optional[Mapping[str, str]] = None) -> "Config":
        """Reads MXKV_* from `environ` (default os.environ); raises ConfigError naming the fix."""
        environ = os.environ if environ is None else environ
        unknown = sorted(k for k in environ if k.startswith("MXKV_") and k not in KNOBS)
        if unknown:
            raise ConfigError(
                f"unknown setting {', '.join(unknown)}; the known MXKV_* knobs are "
                f"{', '.join(KNOBS)} (see README.md, 'Knobs'). Unset or rename it.")
        values = {}
        for name, knob in KNOBS.items():
            text = environ.get(name, knob.default)
            try:
                values[name] = knob.parse(text)
            except ValueError as err:
                raise ConfigError(f"{name}={text!r} is invalid: {err}. {knob.doc}") from None
        return cls(mode=values["MXKV_MODE"],
                   bucket_bytes=int(values["MXKV_BUCKET_MB"] * 1024 * 1024),
                   average=values["MXKV_AVERAGE"], group_size=values["MXKV_GROUP_SIZE"],
                   ps_timeout=values["MXKV_PS_TIMEOUT"])

"""An emulated slow link between groups (MXKV_THROTTLE_MBPS, MXKV_THROTTLE_LATENCY_MS),
for rehearsing on one machine the multi-host setting the averaging modes exist for.

Every transfer that crosses groups takes at least latency + bytes / bandwidth: the
parameter-server bridge (what a leader pushes and pulls), the allreduce over all ranks
of mode allreduce, and the model averaging of mode lasgd. An allreduce over two groups
is charged 2 x its size (each group sends its part and receives the other's: what a
hierarchical allreduce moves, less than a flat ring does). A transfer that overlaps
computation (lasgd's average in flight) is only waited for when its result is needed."""
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .collectives import Arrays, Key


@dataclass(frozen=True)
class LinkThrottle:
    megabits_per_second: float
    latency_seconds: float

    def seconds_for(self, nbytes: int) -> float:
        return self.latency_seconds + nbytes * 8 / (self.megabits_per_second * 1e6)

    def wait_since(self, started: float, nbytes: int) -> None:
        """Sleeps until a transfer of `nbytes` begun at `started` (time.monotonic) is done."""
        remaining = started + self.seconds_for(nbytes) - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)


def link_throttle(config) -> Optional[LinkThrottle]:
    """The configured throttle, or None (MXKV_THROTTLE_MBPS=0)."""
    if config.throttle_mbps == 0:
        return None
    return LinkThrottle(config.throttle_mbps, config.throttle_latency_ms / 1000)


def allreduce_bytes(arrays: Sequence[Arrays]) -> int:
    """What an allreduce of these arrays (one per key) moves across two groups."""
    return 2 * sum(a[0].size * np.dtype(a[0].dtype).itemsize for a in arrays)


class ThrottledReducer:
    """Mode allreduce behind a slow link: each allreduce takes at least the link's time."""

    def __init__(self, reducer, throttle: LinkThrottle):
        self._reducer = reducer
        self._throttle = throttle

    def allreduce(self, op: str, keys: Sequence[Key], inputs: Sequence[Arrays],
                  outputs: Sequence[Arrays], average: bool) -> None:
        started = time.monotonic()
        self._reducer.allreduce(op, keys, inputs, outputs, average)
        self._throttle.wait_since(started, allreduce_bytes(outputs))

"""An emulated slow link between groups (MXKV_THROTTLE_MBPS, MXKV_THROTTLE_LATENCY_MS),
for rehearsing on one machine the multi-host setting the hybrid modes exist for.

Each group has one link to the other groups, shared by its ranks as a host's are by its
network card. Every transfer that crosses groups takes at least latency + bytes /
bandwidth for the bytes it really moves, after what the group's other ranks already put
on the link: here, what a group leader (its group's only rank on this path) pushes to and
pulls from the parameter server; in the C++ collectives (csrc/group_link.h,
csrc/shared_link_clock.h), every exchange step of an allreduce algorithm with a rank of
another group (mode allreduce, flat or hierarchical; lasgd's model average), so each
algorithm is charged for its own traffic. A transfer that overlaps computation (lasgd's
average in flight) is only waited for when its result is needed."""

import time
from dataclasses import dataclass
from typing import Optional


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

"""MXKV_FAULT: rehearse a failure. `kill:rank=1:step=5` makes rank 1 kill itself (SIGKILL)
when its store is asked for its 5th pushpull (one per training step), before it
communicates. Actions: kill (SIGKILL, like the OOM killer), raise (an exception),
hang (sleeps for ever: a stuck rank), exit (SystemExit(0): the script ends there, as
one that finished early, and the others are left waiting for it)."""
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Optional

ACTIONS = ("kill", "raise", "hang", "exit")


@dataclass(frozen=True)
class Fault:
    """What to do, on which rank, at which step (1-based)."""

    action: str
    rank: int
    step: int


def parse_fault(text: str) -> Optional[Fault]:
    """'' -> None; 'ACTION:rank=R:step=S' -> Fault; ValueError naming the expected form."""
    if not text.strip():
        return None
    expected = f"ACTION:rank=R:step=S with ACTION one of {', '.join(ACTIONS)}, e.g. kill:rank=1:step=5"
    action, *fields = text.strip().lower().split(":")
    try:
        values = dict(field.split("=", 1) for field in fields)
        fault = Fault(action, int(values.pop("rank")), int(values.pop("step")))
    except (KeyError, ValueError):
        raise ValueError(f"expected {expected}") from None
    if action not in ACTIONS or values or fault.rank < 0 or fault.step < 1:
        raise ValueError(f"expected {expected}")
    return fault


class FaultInjector:
    """Counts this rank's steps and, at the fault's step, carries the fault out."""

    def __init__(self, fault: Fault, rank: int):
        self._fault = fault if fault.rank == rank else None
        self._rank = rank
        self._steps = 0

    def step(self) -> None:
        if self._fault is None:
            return
        self._steps += 1
        if self._steps != self._fault.step:
            return
        action = self._fault.action
        sys.stderr.write(f"mxkv_hybrid: MXKV_FAULT: rank {self._rank} will {action} at step "
                         f"{self._steps}\n")
        sys.stderr.flush()
        sys.stdout.flush()
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "exit":
            raise SystemExit(0)
        if action == "hang":
            while True:
                time.sleep(3600)
        raise RuntimeError(f"MXKV_FAULT: injected failure on rank {self._rank} at step "
                           f"{self._steps}")

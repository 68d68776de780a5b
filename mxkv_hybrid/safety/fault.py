"""MXKV_FAULT: rehearse a failure. `kill:rank=1:step=5` makes rank 1 kill itself (SIGKILL)
when its store is asked for its 5th pushpull (one per training step), before it
communicates. Actions: kill (SIGKILL, like the OOM killer), raise (an exception),
hang (sleeps for ever: a stuck rank), exit (SystemExit(0): the script ends there, as
one that finished early, and the others are left waiting for it)."""

import os
import signal
import sys
import time

from ..config import Fault


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
        sys.stderr.write(
            f"mxkv_hybrid: MXKV_FAULT: rank {self._rank} will {action} at step {self._steps}\n"
        )
        sys.stderr.flush()
        sys.stdout.flush()
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "exit":
            raise SystemExit(0)
        if action == "hang":
            while True:
                time.sleep(3600)
        raise RuntimeError(
            f"MXKV_FAULT: injected failure on rank {self._rank} at step {self._steps}"
        )

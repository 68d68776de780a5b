"""What ends the launcher's processes when the launcher itself is killed (kill -9, OOM).

Every process the launcher starts runs in a session of its own (so that it can be ended
with all its children), which also means nothing ends it when the launcher dies: the
parameter-server processes and the relays would serve for ever, and a relay on another
host watches this host's relay, not the launcher. So the first process the launcher starts
is a reaper: this file run as a script (no package import: nothing to load), reading the
launcher's pipe. The launcher tells it each process group it starts (`adopt`) and each it
has ended (`release`); when the pipe closes while groups are left, the launcher is gone:
the reaper sends each SIGTERM (mpiexec then ends its ranks on every host), SIGKILL to what
outlives the grace period, and exits. A launcher that ends normally has released them all.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Optional, Set

GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL, as launch/processes.py's


class Reaper:
    """The launcher's end of the pipe (started on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Optional[subprocess.Popen] = None

    def _tell(self, line: str) -> None:
        with self._lock:
            if self._process is None:
                self._process = subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__)],
                    stdin=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
            assert self._process.stdin is not None  # (a pipe)
            try:
                self._process.stdin.write(line + "\n")
                self._process.stdin.flush()
            except BrokenPipeError:
                pass  # (the reaper was killed: nothing more it can do)

    def adopt(self, pgid: int) -> None:
        """Process group `pgid` is ended if the launcher dies before it releases it."""
        self._tell(f"adopt {pgid}")

    def release(self, pgid: int) -> None:
        """Process group `pgid` has been ended by the launcher."""
        self._tell(f"release {pgid}")


REAPER = Reaper()  # the launcher's one reaper


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def main() -> None:
    groups: Set[int] = set()
    for line in sys.stdin:  # until the launcher's end closes: at its exit, or its death
        verb, _, pgid = line.strip().partition(" ")
        if verb == "adopt":
            groups.add(int(pgid))
        elif verb == "release":
            groups.discard(int(pgid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        groups = {pgid for pgid in groups if _alive(pgid)}
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + GRACE_SECONDS
        while any(_alive(pgid) for pgid in groups) and time.monotonic() < deadline:
            time.sleep(0.1)


if __name__ == "__main__":
    main()

"""A rank's keeper: the rank's end of the launcher's link (control/link.py), a process of
its own started by control/keeper.py at `import mxkv_hybrid`, before MPI_Init. This file
is run as a script (no package import: no MXNet, no MPI; the control channel's framing,
channel.py, is imported by path), so that a rank blocked in
MPI_Init or in C code with Python's lock held, which cannot run a thread, is still kept:
the keeper says who the rank is, beats, and ends the rank (then itself) when the launcher
has been silent for MXKV_LOST_SECONDS, closed the link, or cannot be reached that long;
it ends when the rank does.

    python keeper_process.py TOKEN HOST PORT RANK LOST_SECONDS RANK_PID BEAT_SECONDS
"""

import os
import select
import signal
import socket
import sys
import time
from typing import List, Union

try:
    from .channel import BEAT, encode
except ImportError:  # run as a script: its sibling, by path
    from channel import BEAT, encode  # type: ignore[import-not-found,no-redef]


class LinkKeeper:
    """A rank's end of the link, in its keeper process: says who the rank is, beats every
    second, and ends the rank (then itself) when the launcher has been silent for
    `lost_seconds`, closed the link, or cannot be reached that long; ends when the rank does."""

    def __init__(
        self,
        token: str,
        host: str,
        port: int,
        rank: int,
        lost_seconds: float,
        rank_pid: int,
        beat_seconds: float,
    ):
        self._token, self._where, self._rank = token, (host, port), rank
        self._lost_seconds, self._beat_seconds = lost_seconds, beat_seconds
        self._rank_pid = rank_pid
        self._rank_ended = os.pidfd_open(rank_pid)

    def _end_rank(self, why: str) -> None:
        sys.stderr.write(
            f"mxkv_hybrid: rank {self._rank} on {socket.gethostname()}: {why} "
            f"(MXKV_LOST_SECONDS={self._lost_seconds:g}): the launcher is gone or "
            "this host is cut off from it; ending this rank\n"
        )
        sys.stderr.flush()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(self._rank_pid, sig)
            except ProcessLookupError:
                break
            if select.select([self._rank_ended], [], [], 3.0)[0]:
                break
        os._exit(1)

    def _wait(self, seconds: float) -> None:
        """Sleeps `seconds`; exits at once when the rank has ended."""
        if select.select([self._rank_ended], [], [], seconds)[0]:
            os._exit(0)

    def _connect(self) -> socket.socket:
        started = time.monotonic()
        while True:
            try:
                connection = socket.create_connection(self._where, timeout=self._beat_seconds)
                break
            except OSError as err:
                if time.monotonic() - started > self._lost_seconds:
                    self._end_rank(
                        f"could not reach the launcher at {self._where[0]}:"
                        f"{self._where[1]} for {self._lost_seconds:g} s ({err})"
                    )
                self._wait(self._beat_seconds)
        hello = {
            "token": self._token,
            "rank": self._rank,
            "host": socket.gethostname(),
            "address": connection.getsockname()[0],
        }
        connection.sendall(encode(hello))
        connection.setblocking(False)
        return connection

    def run(self) -> None:
        connection = self._connect()
        heard = time.monotonic()
        while True:
            try:
                connection.send(BEAT)
            except (BlockingIOError, InterruptedError):
                pass  # a full buffer: the launcher is not reading; its silence counts
            except OSError:
                self._end_rank("the launcher closed its link")
            watched: List[Union[socket.socket, int]] = [connection, self._rank_ended]
            ready, _, _ = select.select(watched, [], [], self._beat_seconds)
            if self._rank_ended in ready:
                os._exit(0)
            if connection in ready:
                try:
                    data = connection.recv(4096)
                except OSError as err:
                    self._end_rank(f"the launcher's link failed ({err})")
                if not data:
                    self._end_rank("the launcher closed its link")
                heard = time.monotonic()
            if time.monotonic() - heard > self._lost_seconds:
                self._end_rank(
                    f"no word from the launcher at {self._where[0]}:"
                    f"{self._where[1]} for {time.monotonic() - heard:.0f} s"
                )


if __name__ == "__main__":
    try:
        token, host, port, rank, lost, pid, beat = sys.argv[1:8]
        keeper = LinkKeeper(token, host, int(port), int(rank), float(lost), int(pid), float(beat))
    except ProcessLookupError:
        sys.exit(0)  # the rank ended before its keeper started (it failed at start-up)
    keeper.run()

"""Stall detection: a rank that waits too long for the others in one collective finds
out where every rank is and ends the job with a report, instead of hanging for ever.

Every rank counts the waits it enters (the store's collectives and barrier, the
uneven-shard and finite-value agreements; not a group's wait for its leader, which the
parameter-server timeout MXKV_PS_TIMEOUT bounds) and keeps what it is doing now, which
includes a bucket that the communication thread of MXKV_OVERLAP=1 (or lasgd's average
in flight) has been reducing, when the caller's thread is not waiting itself. A monitor
thread per rank answers questions on a private duplicate of COMM_WORLD. When this rank's
current wait passes MXKV_STALL_TIMEOUT seconds, its monitor asks every other rank where it
is (a rank that is dead, or stuck with Python's GIL held, does not answer within
ANSWER_SECONDS), prints one line per rank and ends the job (topology.end_job), which
makes mpiexec stop every other rank. Under mxkv-launch it asks only the ranks the launcher
hears from (launch/control/keeper.ask_launcher): MPICH crashes sending to a rank on a host cut off
long enough for UCX to fail the connection, so the others are named from the launcher's
view instead. A rank that dies outright (killed, out of memory,
an uncaught exception) is stopped by mpiexec at once, without this.
"""

import atexit
import sys
import threading
import time
import weakref
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple

from ..launch.control.keeper import ask_launcher

QUERY, ANSWER = 7001, 7002  # message tags on the monitor's communicator
POLL_SECONDS = 0.2
ANSWER_SECONDS = 3.0
DEFER_SECONDS = 10.0  # a stalled rank that was asked lets the asker report, this long
BACKGROUND_WAIT = "a bucket reduced behind MXNet's engine (MXKV_OVERLAP)"


@dataclass(frozen=True)
class Whereabouts:
    """Where one rank is: its number of waits so far, the current one (if waiting), for
    how long it has been there, and whether its script has ended."""

    rank: int
    host: str
    waits: int
    waiting_in: Optional[str]
    seconds: float
    finished: bool
    outside: Optional[str] = None  # a wait outside MPI (the parameter server), if in one

    def describe(self, stalled_wait: int) -> str:
        if self.outside is not None:
            return (
                f"rank {self.rank} on {self.host}: {self.outside} for {self.seconds:.0f} s "
                f"(after wait #{self.waits}; MXKV_PS_TIMEOUT bounds it)"
            )
        if self.finished:
            return (
                f"rank {self.rank} on {self.host}: its script ended after {self.waits} waits "
                "(the ranks ran different numbers of steps? see "
                "docs/guides/batches-and-gradients.md)"
            )
        if self.waiting_in is not None:
            return (
                f"rank {self.rank} on {self.host}: waiting in #{self.waits} "
                f"({self.waiting_in}) for {self.seconds:.0f} s"
            )
        behind = " (it has not reached the stalled wait)" if self.waits < stalled_wait else ""
        return (
            f"rank {self.rank} on {self.host}: working (not in a collective) for "
            f"{self.seconds:.0f} s after wait #{self.waits}{behind}: hung, or busy alone"
        )


class StallMonitor:
    """The waits of this rank, and the thread that watches them (one per process)."""

    def __init__(
        self,
        comm: Any,
        host: str,
        timeout: float,
        on_stall: Callable[[], None],
        first_rank: int = 0,
        launcher_link: str = "",
    ):
        self._comm = comm  # a private duplicate: only monitors talk on it
        self._first_rank = first_rank  # the number of comm's rank 0 in the whole job
        self._launcher_link = launcher_link  # MXKV_LAUNCHER_LINK, "" without mxkv-launch
        self._host = host
        self._timeout = timeout
        self._on_stall = on_stall
        self._lock = threading.Lock()
        self._waits = 0
        self._waiting_in: Optional[str] = None
        self._outside: Optional[str] = None  # a wait outside MPI (see outside())
        self._since = time.monotonic()
        self._finished = False
        self._last_asked = float("-inf")  # when another rank last asked where we are
        self._sent: list = []  # requests of the questions in flight (they own the buffers)
        self._background: List[weakref.WeakMethod] = []  # seconds a background bucket has run
        atexit.register(self._mark_finished)
        threading.Thread(target=self._watch, name="mxkv-stall-monitor", daemon=True).start()

    @contextmanager
    def waiting(self, what: str):
        """Marks a blocking wait on the other ranks (collective calls, every rank alike)."""
        with self._lock:
            self._waits += 1
            self._waiting_in, self._since = what, time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._waiting_in, self._since = None, time.monotonic()

    @contextmanager
    def outside(self, what: str):
        """Marks a wait outside MPI (the parameter server), so that a report names it."""
        with self._lock:
            self._outside, self._since = what, time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._outside, self._since = None, time.monotonic()

    def watch_background(self, seconds_busy: Callable[[], float]) -> None:
        """Also watches collectives run by another thread: `seconds_busy` (a bound method,
        held weakly) says how long its current one has run, 0 when idle."""
        with self._lock:
            self._background.append(weakref.WeakMethod(seconds_busy))

    def whereabouts(self) -> Whereabouts:
        with self._lock:
            waiting_in, seconds = self._waiting_in, time.monotonic() - self._since
            waits, finished, background = self._waits, self._finished, list(self._background)
            outside = self._outside
        if waiting_in is None and outside is None:
            methods = (ref() for ref in background)
            busy = max((method() for method in methods if method), default=0.0)
            if busy > 0:
                waiting_in, seconds = BACKGROUND_WAIT, busy
        return Whereabouts(
            self._first_rank + self._comm.Get_rank(),
            self._host,
            waits,
            waiting_in,
            seconds,
            finished,
            outside,
        )

    def _mark_finished(self) -> None:
        """At exit (before MPI_Finalize, which would block with the GIL held): wait for the
        other ranks to exit too, while the monitor still answers "finished" to a rank that
        is stalled waiting for this one."""
        with self._lock:
            self._finished = True
        request = self._comm.Ibarrier()
        while not request.Test():
            time.sleep(0.02)

    def _answer_questions(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        while self._comm.iprobe(source=MPI.ANY_SOURCE, tag=QUERY, status=status):
            asker = status.Get_source()
            self._comm.recv(source=asker, tag=QUERY)
            self._comm.send(self.whereabouts(), dest=asker, tag=ANSWER)
            self._last_asked = time.monotonic()

    def _stalled(self) -> bool:
        """Waiting too long, and no other stalled rank is already reporting."""
        here = self.whereabouts()
        return (
            self._timeout > 0
            and here.waiting_in is not None
            and here.seconds > self._timeout
            and time.monotonic() - self._last_asked > DEFER_SECONDS
        )

    def _watch(self) -> None:
        while True:
            time.sleep(POLL_SECONDS)
            self._answer_questions()
            if self._stalled():
                self._report_and_stop()
                return

    def _reachable(self) -> Tuple[List[int], Dict[int, str]]:
        """The other ranks (of comm) to ask, and for each of the rest why it is not asked."""
        me = self._comm.Get_rank()
        others = [r for r in range(self._comm.Get_size()) if r != me]
        if not self._launcher_link:
            return others, {}
        seen = ask_launcher(self._launcher_link)
        if seen is None:
            return [], {
                r: f"rank {self._first_rank + r}: not asked: the launcher could not be "
                "reached either (is this host cut off?)"
                for r in others
            }
        now = time.monotonic()
        reachable, skipped = [], {}
        for rank in others:
            known = seen.get(self._first_rank + rank)
            if known is not None and known.heard(now):
                reachable.append(rank)
            else:
                skipped[rank] = (
                    f"{known.describe_silence(now)}: not asked"
                    if known
                    else f"rank {self._first_rank + rank}: not asked: the launcher "
                    "has never heard from it"
                )
        return reachable, skipped

    def _ask(self, others: List[int]) -> Dict[int, Whereabouts]:
        me = self._comm.Get_rank()
        self._sent = [self._comm.isend(None, dest=rank, tag=QUERY) for rank in others]
        answers = {me: self.whereabouts()}
        deadline = time.monotonic() + ANSWER_SECONDS
        while time.monotonic() < deadline and len(answers) < len(others) + 1:
            for rank in others:
                if rank not in answers and self._comm.iprobe(source=rank, tag=ANSWER):
                    answers[rank] = self._comm.recv(source=rank, tag=ANSWER)
            self._answer_questions()  # another stalled rank may be asking us
            time.sleep(0.05)
        return answers

    def _report_and_stop(self) -> None:
        here = self.whereabouts()
        reachable, skipped = self._reachable()
        answers = self._ask(reachable)
        lines = [
            (
                f"mxkv_hybrid: rank {here.rank} on {self._host} waited {here.seconds:.0f} s "
                f"in #{here.waits} ({here.waiting_in}) for the other ranks "
                f"(MXKV_STALL_TIMEOUT={self._timeout:g}); ending the job. Where the ranks are:"
            )
        ]
        for rank in range(self._comm.Get_size()):
            answer = answers.get(rank)
            lines.append(
                "  "
                + (
                    answer.describe(here.waits)
                    if answer is not None
                    else skipped[rank]
                    if rank in skipped
                    else f"rank {self._first_rank + rank}: no answer within "
                    f"{ANSWER_SECONDS:g} s (dead, "
                    "exiting, or stuck with Python's GIL held)"
                )
            )
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
        self._on_stall()


_monitor: Optional[StallMonitor] = None


def install(monitor: StallMonitor) -> None:
    global _monitor
    _monitor = monitor


def watch_background(seconds_busy: Callable[[], float]) -> None:
    """See StallMonitor.watch_background (nothing when the job has one rank)."""
    if _monitor is not None:
        _monitor.watch_background(seconds_busy)


def outside(what: str) -> ContextManager:
    """A wait outside MPI (the parameter server), named in stall reports."""
    return nullcontext() if _monitor is None else _monitor.outside(what)


def waiting(what: str) -> ContextManager:
    """A blocking wait on the other ranks, watched when the job has more than one rank."""
    return nullcontext() if _monitor is None else _monitor.waiting(what)

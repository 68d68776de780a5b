"""Which rank ended first: mpiexec stops every rank as soon as one dies, and its own
report names a process it picked (measured: rank 0, which it had stopped itself, when
rank 1 was killed). The launcher watches the ranks on this host through pidfds, which
become readable the moment a process ends, so the first rank to go is known."""

import os
import select
import time
from typing import Dict, List, Optional, Tuple

from .control.members import Member

RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK")  # set by Hydra / Open MPI
SEARCH_SECONDS = 0.1  # one scan of /proc/*/stat and the new processes' environ: a few ms


def process_stats() -> Dict[int, List[str]]:
    """{pid: the fields of /proc/pid/stat after "pid (name)"} of every process: state,
    parent pid, process group, ..."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                found[int(entry)] = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
    return found


def _descendants(root: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for pid, fields in process_stats().items():
        children.setdefault(int(fields[1]), []).append(pid)
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _uts_namespace(pid: int) -> Optional[str]:
    try:
        return os.readlink(f"/proc/{pid}/ns/uts")
    except OSError:
        return None


def _rank_of(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            variables = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    for name in RANK_VARIABLES:
        if name.encode() in variables:
            return int(variables[name.encode()])
    return None


class RankWatch:
    """The ranks of one job that run on this host, and the first of them to end. A group's
    own MPI job numbers its ranks from 0; `first_rank` is the first one's number in all."""

    def __init__(self, launcher_pid: int, num_ranks: int, first_rank: int = 0):
        self._root = launcher_pid
        self._num_ranks = num_ranks
        self._first_rank = first_rank
        self._watched: Dict[int, Tuple[int, int]] = {}  # pidfd -> (rank, pid)
        self._ranks_seen: Dict[int, int] = {}  # rank -> pid
        self._last_search = float("-inf")
        try:  # its end also ends a wait, so the launcher notices the job's end at once
            self._root_ended: Optional[int] = os.pidfd_open(launcher_pid)
        except OSError:  # already gone
            self._root_ended = None
        self.first_ended: List[Tuple[int, int]] = []  # (rank, pid) of the first to end
        self._first_ended_at = float("inf")  # when they were noticed (time.monotonic())

    def _search(self) -> None:
        """Looks for rank processes not yet watched (every SEARCH_SECONDS until all ranks
        of the job are found; ranks on other hosts never are). A rank that ends before it
        is found cannot be named, and ranks can end a second after they start."""
        now = time.monotonic()
        if len(self._ranks_seen) >= self._num_ranks or now - self._last_search < SEARCH_SECONDS:
            return
        self._last_search = now
        here = _uts_namespace(os.getpid())
        for pid in _descendants(self._root):
            if _uts_namespace(pid) != here:  # another host's, reached through a local ssh
                continue
            rank = _rank_of(pid)
            if rank is None or rank in self._ranks_seen:
                continue
            try:
                descriptor = os.pidfd_open(pid)
            except OSError:  # already gone
                continue
            self._ranks_seen[rank] = pid
            self._watched[descriptor] = (rank, pid)

    def wait(self, seconds: float) -> None:
        """Sleeps up to `seconds` or until the job's root process ends, noting the first
        watched rank that ends."""
        wait_for_any([self], seconds)

    def _descriptors(self) -> List[int]:
        """What a wait selects on: the watched ranks, and the job's root while it runs."""
        self._search()
        return [*self._watched, *([self._root_ended] if self._root_ended is not None else [])]

    def _note(self, ready: List[int]) -> None:
        """Notes the watched ranks among `ready` (descriptors select found readable)."""
        gone = [
            self._watched.pop(descriptor) for descriptor in ready if descriptor in self._watched
        ]
        for descriptor in ready:
            if descriptor != self._root_ended:
                os.close(descriptor)
        if gone and not self.first_ended:  # several only if they ended within one wake-up
            self.first_ended = sorted(gone)
            self._first_ended_at = time.monotonic()

    def describe_first_ended(self, host: str, failed: Optional[Member] = None) -> Optional[str]:
        """'rank 1 (pid 6872)' or 'ranks 0 (pid ..) and 2 (pid ..), together', or None.
        `failed`: the first script that reported a non-zero exit on the launcher's link:
        before it ends, so before mpiexec stops the others; it is named first if that was
        before any watched rank was seen to end (a big process takes a while to end, and
        under load the ranks mpiexec killed for it were seen to end first)."""
        if failed is not None and (failed.ended_at or 0.0) <= self._first_ended_at:
            pid = self._ranks_seen.get(failed.rank - self._first_rank)
            if pid is not None:
                return (
                    f"rank {failed.rank} (pid {pid} on {host}) was the first rank to end "
                    "(its script failed)"
                )
        if not self.first_ended:
            return None
        names = [
            f"{self._first_rank + rank} (pid {pid} on {host})" for rank, pid in self.first_ended
        ]
        partial = (
            ""
            if len(self._ranks_seen) == self._num_ranks
            else f" of the {len(self._ranks_seen)} on this host"
        )
        if len(names) == 1:
            return f"rank {names[0]} was the first rank{partial} to end"
        return f"ranks {', '.join(names)} were the first ranks{partial} to end, together"

    def close(self) -> None:
        for descriptor in self._watched:
            os.close(descriptor)
        self._watched.clear()
        if self._root_ended is not None:
            os.close(self._root_ended)
            self._root_ended = None


def wait_for_any(watches: List[RankWatch], seconds: float) -> None:
    """Sleeps up to `seconds` or until a rank or the root of any of the jobs ends, noting
    each job's first rank to end. One wait for all: a job waited on in turn was seen to
    end (its mpiexec gone) before its killed rank was noticed, which then went unnamed."""
    owners = {descriptor: watch for watch in watches for descriptor in watch._descriptors()}
    if not owners:
        time.sleep(seconds)
        return
    ready, _, _ = select.select(list(owners), [], [], seconds)
    for watch in watches:
        watch._note([descriptor for descriptor in ready if owners[descriptor] is watch])

"""Which ranks of a job are lost to the launcher: not heard from on their link for
MXKV_LOST_SECONDS (a host cut off, or dead with its connection never closed), or, for ranks
started on another host, never heard from within timing.first_call_seconds after their job
started (a partition before they registered); and which failed alone: their script ended
with a non-zero status while their job went on (mpiexec ends a job when a rank is killed
or aborts, not when its script exits: the others would wait for it in their next
collective), or ended, even with status 0, before it started MPI while the others wait in
MPI's start, which waits for all."""

import time
from typing import Dict, Iterable, Optional

from .control.link import LinkServer, RankExit
from .control.timing import EXIT_GRACE_SECONDS, HEARD_SECONDS, first_call_seconds


class LostRanks:
    """The launcher's view of its link (`link`), with the bound and the ranks it expects to
    hear from even if they never called ({rank: host} on other hosts, running mxkv_hybrid)."""

    def __init__(self, link: LinkServer, bound: float, remote_ranks: Dict[int, str]):
        self.link = link
        self.bound = bound
        self._remote = remote_ranks

    @property
    def remote_ranks(self) -> Dict[int, str]:
        """{rank: host} of the ranks expected to call from other hosts."""
        return dict(self._remote)

    def expect_only(self, hosts: Dict[int, Optional[str]]) -> None:
        """The job's ranks are numbered again ({rank: host}, after groups were left out):
        those on other hosts are expected to call."""
        remote = set(self._remote.values())
        self._remote = {rank: host for rank, host in hosts.items() if host in remote}

    def failed_alone(self, ranks: Iterable[int]) -> Optional[RankExit]:
        """The first rank of `ranks` whose script ended with a non-zero status more than
        EXIT_GRACE_SECONDS ago (its job still running: the caller's to know), or None."""
        return self.first_failed(ranks, EXIT_GRACE_SECONDS)

    def first_failed(self, ranks: Iterable[int], ago: float = 0.0) -> Optional[RankExit]:
        """The first rank of `ranks` whose script said it ended with a non-zero status,
        more than `ago` seconds ago, or None."""
        now, ranks = time.monotonic(), set(ranks)
        failed = [
            ended
            for rank, ended in self.link.exits().items()
            if rank in ranks and ended.status != 0 and now - ended.when > ago
        ]
        return min(failed, key=lambda ended: ended.when) if failed else None

    def first_to_end(
        self,
        ranks: Iterable[int],
        before: Optional[float] = None,
        wait: float = 0.0,
        elsewhere_than: Optional[str] = None,
    ) -> Optional[str]:
        """Which of `ranks` ended first, as its link tells (its keeper ends with it, on any
        host), if it ended before `before` (time.monotonic(): when the launcher decided to
        end the job itself, the ranks it ended are no news): 'rank 3 on h2 ended first
        (its link closed 0.4 s before any other)', or None. `wait`: seconds to wait for a
        link to close (mpiexec may report a rank's end before its keeper's link closes).
        None too when that rank ran on host `elsewhere_than`."""
        ranks = set(ranks)
        deadline = time.monotonic() + wait
        while True:
            ended = sorted(
                (seen for rank, seen in self.link.ranks().items() if rank in ranks and seen.left),
                key=lambda seen: seen.left_at,
            )
            if ended or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not ended or (before is not None and ended[0].left_at > before):
            return None
        if ended[0].host == elsewhere_than:  # (that host's own view names it better)
            return None
        first = ended[0]
        ahead = ended[1].left_at - first.left_at if len(ended) > 1 else 0.0
        return f"rank {first.rank} on {first.host} ended first (its link closed" + (
            f" {ahead:.1f} s before any other)" if ahead >= 0.1 else ")"
        )

    def ended_before_mpi(self, ranks: Iterable[int]) -> Optional[str]:
        """Why `ranks` (one MPI job) wait for ever in MPI's start, or None: a rank's script
        ended before it started MPI, and another rank has waited there for more than
        EXIT_GRACE_SECONDS since both were true (MPI's start waits for every rank)."""
        now, ranks = time.monotonic(), set(ranks)
        ended = [
            exit
            for rank, exit in self.link.exits().items()
            if rank in ranks and not self.link.mpi_started(rank)
        ]
        waiting = {rank: since for rank, since in self.link.mpi_starts().items() if rank in ranks}
        if not ended or not waiting:
            return None
        first = min(ended, key=lambda exit: exit.when)
        rank, since = min(waiting.items(), key=lambda item: item[1])
        if now - max(since, first.when) <= EXIT_GRACE_SECONDS:
            return None
        return (
            f"rank {first.rank}'s script exited with status {first.status} before it "
            f"started MPI (created its store), and rank {rank} has waited for it in MPI's "
            f"start for {now - since:.0f} s: MPI's start waits for every rank of the job, "
            "so every rank must create its store, or none"
        )

    def first_lost(self, ranks: Iterable[int], started: float) -> Optional[str]:
        """How the first lost rank of `ranks` (a job started at `started`) was lost, with
        the bound, or None."""
        now = time.monotonic()
        seen = self.link.ranks()
        for rank in ranks:
            known = seen.get(rank)
            if known is not None and known.silent_for(now) > self.bound:
                how = (
                    f"rank {rank} on {known.host} ({known.address}) was last heard from "
                    f"{known.silent_for(now):.0f} s ago"
                )
                bound = f"MXKV_LOST_SECONDS={self.bound:g}"
            elif (
                known is None
                and rank in self._remote
                and now - started > first_call_seconds(self.bound)
            ):
                how = (
                    f"rank {rank}, started on {self._remote[rank]} {now - started:.0f} s "
                    "ago, was never heard from"
                )
                bound = f"a first call within {first_call_seconds(self.bound):g} s"
            else:
                continue
            return f"{how} ({bound})"
        return None

    def one_world_lost(self, ranks: Iterable[int], started: float) -> Optional[str]:
        """Why a job that is one MPI world (`ranks`, started at `started`) must be ended for
        a lost host, or None: a rank lost (first_lost), or a rank that ended while another
        has fallen silent for a few heartbeats (HEARD_SECONDS), since mpiexec cannot end
        the ranks of a host it cannot reach and waits for them."""
        ranks = list(ranks)
        lost = self.first_lost(ranks, started)
        if lost:
            return f"{lost}: its host is cut off or dead"
        now = time.monotonic()
        known_ranks = self.link.ranks()
        seen = [known_ranks.get(rank) for rank in ranks]
        ended = [known for known in seen if known is not None and known.left]
        silent = [
            known
            for known in seen
            if known is not None and not known.left and known.silent_for(now) > HEARD_SECONDS
        ]
        if ended and silent:
            return (
                f"rank {ended[0].rank} ended, and {silent[0].describe_silence(now)}: "
                "mpiexec cannot end the ranks of a host it cannot reach"
            )
        return None

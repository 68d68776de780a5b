"""The launcher's view of the ranks it started, for control/verdict.py to judge: the link's
member table, the bound MXKV_LOST_SECONDS, and the ranks expected to call from other hosts
even if they never did (a partition before they registered)."""

import time
from typing import Dict, Hashable, Iterable, Optional

from .control import verdict
from .control.link import LinkServer
from .control.members import Member


class LostRanks:
    """The view of `link` with the bound and the ranks it expects to hear from ({rank:
    host} on other hosts, running mxkv_hybrid)."""

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

    def judge(
        self,
        ranks: Iterable[int],
        started: float,
        one_world: bool,
        relay_crash: Optional[str] = None,
    ) -> verdict.Verdict:
        """The verdict on the running MPI job of `ranks`, started at `started`."""
        ranks = list(ranks)
        expected: Dict[Hashable, str] = {r: h for r, h in self._remote.items() if r in ranks}
        job = verdict.Job(ranks, started, expected, one_world)
        rows = self.link.members.said()
        return verdict.judge(rows, job, self.bound, time.monotonic(), relay_crash)

    def first_failed(self, ranks: Iterable[int]) -> Optional[Member]:
        """The first of `ranks` whose script said it ended with a non-zero status, or None."""
        return verdict.first_failed(self.link.members.said(), ranks, time.monotonic())

    def first_to_end(
        self,
        ranks: Iterable[int],
        before: Optional[float] = None,
        wait: float = 0.0,
        elsewhere_than: Optional[str] = None,
    ) -> Optional[str]:
        """verdict.first_to_end of `ranks`, waiting up to `wait` seconds for a link to close
        (mpiexec may report a rank's end before its keeper's link closes); None too when
        that rank ran on host `elsewhere_than` (that host's own view names it better), and
        at once when a rank of them never called: the first link to close would not be
        the first rank to end."""
        ranks = set(ranks)
        rows = self.link.members.rows()
        if any(key not in rows or rows[key].last_heard is None for key in ranks):
            return None
        deadline = time.monotonic() + wait
        while True:
            rows = self.link.members.rows()
            ended = [row for key, row in rows.items() if key in ranks and row.left]
            if ended or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        first = min(ended, key=lambda row: row.left_at or 0.0, default=None)
        if first is not None and first.host == elsewhere_than:
            return None
        return verdict.first_to_end(rows, ranks, before)

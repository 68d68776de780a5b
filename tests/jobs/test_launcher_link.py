"""Which rank the launcher names first (launch/rank_watch.py), with real child processes as
ranks: a script that reported its failure on the link before its rank ended is named ahead of
a rank killed for it."""

import os
import subprocess
import sys
import time

import pytest

from mxkv_hybrid.launch.control.members import Member
from mxkv_hybrid.launch.rank_watch import RankWatch


def failed_at(when: float) -> Member:
    """Rank 1's row once its script reported status 1 at `when`."""
    return Member(1, "rank 1 on h (127.0.0.1)", "h", "127.0.0.1", status=1, ended_at=when)


@pytest.mark.own_processes  # (which rank ended first)
def test_a_script_that_reported_its_failure_is_named_before_the_rank_killed_for_it():
    """Two 'ranks' (children with PMI_RANK set); rank 0 is killed and seen to end first, as
    under load, when mpiexec's kill of rank 0 ended it before the failing rank 1, a big
    process, finished ending. Rank 1's report on the link came before that end: it is
    named; a report that came after the end is not."""
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            env=dict(os.environ, PMI_RANK=str(r)),
        )
        for r in (0, 1)
    ]
    watch = RankWatch(os.getpid(), 2)
    try:
        deadline = time.monotonic() + 10
        while len(watch._ranks_seen) < 2 and time.monotonic() < deadline:
            watch.wait(0.05)
        reported = time.monotonic()  # rank 1's script says it failed
        ranks[0].kill()
        while not watch.first_ended and time.monotonic() < deadline:
            watch.wait(0.05)
        assert watch.describe_first_ended("h").startswith(f"rank 0 (pid {ranks[0].pid} on h)")
        assert watch.describe_first_ended("h", failed_at(reported)) == (
            f"rank 1 (pid {ranks[1].pid} on h) was the first rank to end (its script failed)"
        )
        first = watch.describe_first_ended("h", failed_at(time.monotonic()))
        assert first.startswith("rank 0 ")
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
        watch.close()

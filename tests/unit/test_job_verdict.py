"""The one verdict (launch/control/verdict.py) on a job's member table: one case per row
of the table below, each member table built as the link would write it, with the state,
the exit status and the sentence the user reads."""

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import pytest

from mxkv_hybrid.launch.control.members import Member, MemberTable, Phase, rank_member
from mxkv_hybrid.launch.control.timing import EXIT_GRACE_SECONDS, HEARD_SECONDS
from mxkv_hybrid.launch.control.verdict import (
    HelperState,
    Job,
    State,
    first_to_end,
    judge,
    judge_helpers,
    judge_silence,
)

BOUND = 5.0  # MXKV_LOST_SECONDS
NOW = 1000.0  # the launcher's clock at the verdict
STARTED = NOW - 60  # the job's start


@dataclass(frozen=True)
class Case:
    """Ranks 0 and 1 (rank 1 on h2, expected to call from there); `events` written to
    the table as the link would; the verdict's state, status and sentence (a pattern)."""

    name: str
    events: List[tuple]
    state: State
    status: int = 0
    sentence: str = ""
    one_world: bool = False
    relay_crash: Optional[str] = None
    expected: Dict[int, str] = field(default_factory=lambda: {1: "h2"})


HELLO = [("add", 0, NOW - 1), ("add", 1, NOW - 1)]
CASES = [
    Case("every rank heard", HELLO, State.ALIVE),
    Case(
        "silent past the bound",
        [("add", 0, NOW - 1), ("add", 1, NOW - BOUND - 1)],
        State.LOST,
        1,
        r"rank 1 on h2 \(198\.18\.0\.12\) was last heard from 6 s ago \(MXKV_LOST_SECONDS=5\): "
        "its host is cut off or dead",
    ),
    Case("silent within the bound", [("add", 0, NOW), ("add", 1, NOW - BOUND + 1)], State.ALIVE),
    Case(
        "never heard from (another host)",
        [("add", 0, NOW)],
        State.LOST,
        1,
        r"rank 1, started on h2 60 s ago, was never heard from \(a first call within 15 s\)",
    ),
    Case("not yet expected to call", [("add", 0, NOW)], State.ALIVE, expected={}),
    Case(
        "one world: one ended, another silent a few beats",
        [("add", 0, NOW - HEARD_SECONDS - 1), ("add", 1, NOW), ("left", 1, NOW)],
        State.LOST,
        1,
        r"rank 1 ended, and rank 0 on h1 \(198\.18\.0\.11\): the launcher last heard from it "
        r"4 s ago .*mpiexec cannot end the ranks of a host it cannot reach",
        one_world=True,
    ),
    Case(
        "group jobs: one ended, another silent a few beats (mpiexec reports it)",
        [("add", 0, NOW - HEARD_SECONDS - 1), ("add", 1, NOW), ("left", 1, NOW)],
        State.ALIVE,
    ),
    Case(
        "the relay crashed",
        HELLO,
        State.STRANDED,
        1,
        r"the relay on h2 exited with status -9, and ps-lite's messages through it may be lost",
        relay_crash="the relay on h2 exited with status -9",
    ),
    Case(
        "a script failed while the others went on",
        [*HELLO, ("ended", 1, 3, NOW - EXIT_GRACE_SECONDS - 1)],
        State.FAILED,
        3,
        r"rank 1's script exited with status 3 3 s ago, and the other ranks went on",
    ),
    Case(
        "a script failed within the grace (mpiexec may still end the job)",
        [*HELLO, ("ended", 1, 3, NOW - EXIT_GRACE_SECONDS + 1)],
        State.ALIVE,
    ),
    Case("a script ended well", [*HELLO, ("ended", 1, 0, NOW - 10)], State.ALIVE),
    Case(
        "a script ended before MPI while another waits in MPI's start",
        [
            *HELLO,
            ("enter", 0, Phase.IN_MPI_START, NOW - 10),
            ("ended", 1, 0, NOW - EXIT_GRACE_SECONDS - 1),
        ],
        State.STRANDED,
        1,
        r"rank 1's script exited with status 0 before it started MPI \(created its store\), "
        r"and rank 0 has waited for it in MPI's start for 10 s",
    ),
    Case(
        "a script ended after MPI's start",
        [
            *HELLO,
            ("enter", 1, Phase.RUNNING, NOW - 20),
            ("enter", 0, Phase.IN_MPI_START, NOW - 10),
            ("ended", 1, 0, NOW - 5),
        ],
        State.ALIVE,
    ),
    Case(
        "what a rank said before its hello counts",
        [("ended", 1, 2, NOW - 10), *HELLO],
        State.FAILED,
        2,
        r"rank 1's script exited with status 2",
    ),
    Case(
        "silence is judged before a failure",
        [("add", 0, NOW - BOUND - 1), ("add", 1, NOW), ("ended", 1, 3, NOW - 10)],
        State.LOST,
        1,
        r"rank 0 on h1 .* was last heard from 6 s ago",
        relay_crash="the relay on h2 exited with status 1",
    ),
]
HOSTS = {0: ("h1", "198.18.0.11"), 1: ("h2", "198.18.0.12")}


def table_of(events: List[tuple]) -> MemberTable:
    table = MemberTable()
    for kind, rank, *rest in events:
        if kind == "add":
            table.add(rank_member(rank, *HOSTS[rank], rest[0]), rest[0])
        elif kind == "left":
            table.left(rank, rest[0])
        elif kind == "ended":
            table.ended(rank, rest[0], rest[1])
        else:
            table.enter(rank, rest[0], rest[1])
    return table


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_verdict_on_a_member_table(case: Case):
    job = Job([0, 1], STARTED, case.expected, case.one_world)
    found = judge(table_of(case.events).said(), job, BOUND, NOW, case.relay_crash)
    assert (found.state, found.status) == (case.state, case.status), found
    assert found.alive == (case.state is State.ALIVE)
    if case.sentence:
        assert re.search(case.sentence, found.sentence), found.sentence
    else:
        assert found.sentence == ""


def test_a_joined_launcher_is_lost_once_silent_past_the_bound():
    group = Member(7, "group 1 (2 rank(s), joined from 198.18.0.12)", "h2", "198.18.0.12")
    group.last_heard = NOW - BOUND - 2
    found = judge_silence(group, BOUND, NOW)
    assert found.state is State.LOST
    assert found.sentence == (
        "group 1 (2 rank(s), joined from 198.18.0.12) was last heard from 7 s ago "
        "(MXKV_LOST_SECONDS=5): its host is cut off or dead"
    )
    group.last_heard = NOW - BOUND + 1
    assert judge_silence(group, BOUND, NOW).alive


def test_the_first_to_end_is_named_with_its_lead_unless_the_launcher_ended_it():
    table = table_of([*HELLO, ("left", 1, NOW - 2), ("left", 0, NOW - 1.5)])
    rows = table.rows()
    assert (
        first_to_end(rows, [0, 1])
        == "rank 1 on h2 ended first (its link closed 0.5 s before any other)"
    )
    assert first_to_end(rows, [0, 1], before=NOW - 3) is None  # the launcher's own doing
    assert first_to_end(rows, [0]) == "rank 0 on h1 ended first (its link closed)"


def test_a_vital_helper_that_failed_ends_the_job_and_a_relay_does_not():
    server = HelperState("parameter server 0", 41, None, vital=True)
    relay = HelperState("relay on h2", 42, -9, vital=False)
    assert judge_helpers([server, relay], "ranks").alive
    failed = judge_helpers([relay, dataclasses.replace(server, status=-9)], "ranks")
    assert (failed.state, failed.status) == (State.FAILED, 1)
    assert failed.sentence == (
        "the parameter server 0 (pid 41) exited with status -9 while the ranks were running"
    )
    assert judge_helpers([dataclasses.replace(server, status=0)], "ranks").alive  # it left

"""The one decision on a running job's members (control/members.py): alive, failed, lost
or stranded, each with the sentence the user reads. Every launch path asks `judge` and acts
on its answer (ends the job, restarts a group, gives it up); nothing else decides that a
member is gone. What follows a verdict (restart, stop the others) is the restart policy's
(control/restarts.py) and the launch path's.

In the order `judge` looks:
- lost: a member not heard from for MXKV_LOST_SECONDS (a host cut off, or dead with its
  connections never closed), or, started on another host, never heard from within
  timing.first_call_seconds (a partition before it called); in one MPI world, also a
  member that ended while another has fallen silent for HEARD_SECONDS, since mpiexec
  cannot end the ranks of a host it cannot reach and waits for them;
- stranded by its relay: the relay that carried its ps-lite messages crashed, and ps-lite
  never sends a lost message again;
- failed: a member whose script ended with a non-zero status EXIT_GRACE_SECONDS ago while
  its MPI job went on (mpiexec ends a job when a rank is killed or aborts, not when its
  script exits: the others would wait for it in their next collective);
- stranded before MPI: a member that ended, even with status 0, before it started MPI,
  while another has waited in MPI's start (which waits for every rank) EXIT_GRACE_SECONDS.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Dict, Hashable, Iterable, Mapping, Optional, Sequence

from .members import Member, Phase
from .timing import EXIT_GRACE_SECONDS, HEARD_SECONDS, first_call_seconds


class State(str, Enum):
    ALIVE = "alive"
    FAILED = "failed"  # a script failed while the others went on
    LOST = "lost"  # not heard from: its host is cut off or dead
    STRANDED = "stranded"  # alive, but cannot go on (a relay crashed, a peer never started MPI)


@dataclass(frozen=True)
class Verdict:
    """`state`, the `sentence` the user reads (what happened and why it matters) and the
    exit status (`status`) of a job it ends."""

    state: State
    sentence: str = ""
    status: int = 0

    @property
    def alive(self) -> bool:
        return self.state is State.ALIVE


ALIVE = Verdict(State.ALIVE)


@dataclass(frozen=True)
class Job:
    """What a verdict is about: the members `keys` of one MPI job started at `started`
    (time.monotonic()); `expected` {key: host} the members started on other hosts, which
    must call within the first-call bound; `one_world`: every member is in this one MPI
    job (a lost host stops it, and mpiexec cannot end its ranks)."""

    keys: Sequence[Hashable]
    started: float
    expected: Mapping[Hashable, str]
    one_world: bool


def judge(
    rows: Dict[Hashable, Member],
    job: Job,
    bound: float,
    now: float,
    relay_crash: Optional[str] = None,
) -> Verdict:
    """The verdict on `job`, from the member table's `rows` (MemberTable.said()), the
    bound MXKV_LOST_SECONDS and `relay_crash` (how the relay carrying its ps-lite messages
    ended, if it did)."""
    lost = _lost(rows, job, bound, now)
    if lost:
        return Verdict(State.LOST, f"{lost}: its host is cut off or dead", 1)
    if job.one_world and (reason := _ended_beside_silence(rows, job, now)):
        return Verdict(State.LOST, reason, 1)
    stranded_by_relay = judge_relay(relay_crash)
    if not stranded_by_relay.alive:
        return stranded_by_relay
    failed = first_failed(rows, job.keys, now, EXIT_GRACE_SECONDS)
    if failed:
        return Verdict(
            State.FAILED,
            f"rank {failed.key}'s script exited with status {failed.status} "
            f"{now - (failed.ended_at or now):.0f} s ago, and the other ranks went on: they "
            "would wait for it in their next collective (mpiexec ends a job when a rank is "
            "killed, not when its script exits)",
            failed.status or 1,
        )
    stranded = _ended_before_mpi(rows, job.keys, now)
    if stranded:
        return Verdict(State.STRANDED, stranded, 1)
    return ALIVE


def judge_relay(relay_crash: Optional[str]) -> Verdict:
    """Stranded when the relay carrying a job's ps-lite messages crashed (`relay_crash`: how
    it ended), else alive: the whole verdict of a job without the launcher's link."""
    if not relay_crash:
        return ALIVE
    return Verdict(
        State.STRANDED,
        f"{relay_crash}, and ps-lite's messages through it may be lost (the leaders would "
        "wait for them until MXKV_PS_TIMEOUT)",
        1,
    )


@dataclass(frozen=True)
class HelperState:
    """A process the launcher started beside the ranks (the scheduler, a parameter server,
    a relay): its name, pid, exit status (None while it runs) and whether the job needs it."""

    name: str
    pid: int
    status: Optional[int]
    vital: bool


def judge_helpers(helpers: Iterable[HelperState], running: str) -> Verdict:
    """Failed when a vital helper exited with a non-zero status while the `running` (what
    runs: 'ranks', 'groups') were running; a relay, not vital, is started again instead
    (and judged through `relay_crash`)."""
    for helper in helpers:
        if helper.vital and helper.status not in (None, 0):
            return Verdict(
                State.FAILED,
                f"the {helper.name} (pid {helper.pid}) exited with status {helper.status} "
                f"while the {running} were running",
                1,
            )
    return ALIVE


def judge_silence(row: Member, bound: float, now: float) -> Verdict:
    """The verdict on one member heard from on its own connection (a --join-ed group's
    launcher): lost once silent for the bound, else alive."""
    lost = _lost({row.key: row}, Job([row.key], now, {}, False), bound, now)
    return Verdict(State.LOST, f"{lost}: its host is cut off or dead", 1) if lost else ALIVE


def first_failed(
    rows: Dict[Hashable, Member], keys: Iterable[Hashable], now: float, ago: float = 0.0
) -> Optional[Member]:
    """The first of `keys` whose script said it ended with a non-zero status more than
    `ago` seconds ago, or None."""
    keys = set(keys)
    failed = [
        row
        for key, row in rows.items()
        if key in keys and row.status not in (None, 0) and now - (row.ended_at or now) > ago
    ]
    return min(failed, key=lambda row: row.ended_at or now) if failed else None


def first_to_end(
    rows: Dict[Hashable, Member], keys: Iterable[Hashable], before: Optional[float] = None
) -> Optional[str]:
    """Which of `keys` ended first, as its connection tells (a rank's keeper ends with it,
    on any host), if before `before` (time.monotonic(): when the launcher decided to end
    the job itself, the members it ended are no news): 'rank 3 on h2 ended first (its link
    closed 0.4 s before any other)', or None."""
    keys = set(keys)
    ended = sorted(
        (row for key, row in rows.items() if key in keys and row.left_at is not None),
        key=lambda row: row.left_at or 0.0,
    )
    if not ended or (before is not None and (ended[0].left_at or 0.0) > before):
        return None
    first = ended[0]
    ahead = (ended[1].left_at or 0.0) - (first.left_at or 0.0) if len(ended) > 1 else 0.0
    return f"rank {first.key} on {first.host} ended first (its link closed" + (
        f" {ahead:.1f} s before any other)" if ahead >= 0.1 else ")"
    )


def _lost(rows: Dict[Hashable, Member], job: Job, bound: float, now: float) -> Optional[str]:
    """How the first lost member of `job` was lost, with the bound, or None."""
    first_call = first_call_seconds(bound)
    for key in job.keys:
        row = rows.get(key)
        if row is not None and row.last_heard is not None:
            if row.silent_for(now) > bound:
                return (
                    f"{row.name} was last heard from {row.silent_for(now):.0f} s ago "
                    f"(MXKV_LOST_SECONDS={bound:g})"
                )
        elif key in job.expected and now - job.started > first_call:
            return (
                f"rank {key}, started on {job.expected[key]} {now - job.started:.0f} s ago, "
                f"was never heard from (a first call within {first_call:g} s)"
            )
    return None


def _ended_beside_silence(rows: Dict[Hashable, Member], job: Job, now: float) -> Optional[str]:
    """In one MPI world: a member that ended while another has been silent for a few
    heartbeats (HEARD_SECONDS), or None."""
    seen = [rows[key] for key in job.keys if key in rows and rows[key].last_heard is not None]
    ended = [row for row in seen if row.left]
    silent = [row for row in seen if not row.left and row.silent_for(now) > HEARD_SECONDS]
    if ended and silent:
        return (
            f"rank {ended[0].key} ended, and {silent[0].describe_silence(now)}: mpiexec "
            "cannot end the ranks of a host it cannot reach"
        )
    return None


def _ended_before_mpi(
    rows: Dict[Hashable, Member], keys: Iterable[Hashable], now: float
) -> Optional[str]:
    """Why `keys` (one MPI job) wait for ever in MPI's start, or None."""
    keys = set(keys)
    mine = [row for key, row in rows.items() if key in keys]
    ended = [row for row in mine if row.ended_at is not None and not row.started_mpi]
    waiting = [row for row in mine if row.phase is Phase.IN_MPI_START]
    if not ended or not waiting:
        return None
    first = min(ended, key=lambda row: row.ended_at or now)
    longest = min(waiting, key=lambda row: row.phase_since)
    if now - max(longest.phase_since, first.ended_at or now) <= EXIT_GRACE_SECONDS:
        return None
    return (
        f"rank {first.key}'s script exited with status {first.status} before it started "
        f"MPI (created its store), and rank {longest.key} has waited for it in MPI's start "
        f"for {now - longest.phase_since:.0f} s: MPI's start waits for every rank of the "
        "job, so every rank must create its store, or none"
    )

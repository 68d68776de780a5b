"""The launcher's one table of a job's members: every rank it started, wherever it runs
(written by the link, control/link.py), and every group `--join`-ed to a served job (written
by the rendezvous). For each member it holds when it was last heard from, how it ended (its
connection closed, the status it reported) and its phase. control/verdict.py reads it and
is the only place that decides from it; a rank reads its own copy through ask_launcher.
"""

import threading
from dataclasses import dataclass, replace
from enum import Enum
from typing import Dict, Hashable, Iterable, Optional

from .timing import HEARD_SECONDS


class Phase(str, Enum):
    """Where a member is in its job, as far as it told the launcher."""

    STARTING = "starting"  # heard from, not yet in MPI's start
    IN_MPI_START = "in MPI's start"  # MPI_Init waits for every rank of its MPI job
    RUNNING = "running"  # through MPI's start (a joined group: joined)
    ENDED = "ended"  # reported its end (a script's exit status)


@dataclass
class Member:
    """One member: `name` as the user reads it ('rank 3 on h2 (198.18.0.12)'), its host
    and address, when it was last heard from (the launcher's clock; None: never), when
    its connection closed (`left_at`: it ended), the exit status it reported and when, and
    its phase since when."""

    key: Hashable  # a rank's number, a joined group's number
    name: str
    host: str
    address: str
    last_heard: Optional[float] = None
    left_at: Optional[float] = None
    status: Optional[int] = None
    ended_at: Optional[float] = None
    phase: Phase = Phase.STARTING
    phase_since: float = 0.0
    started_mpi: bool = False  # it said it started MPI (or is starting it)

    @property
    def rank(self) -> int:
        return int(self.key)  # type: ignore[call-overload]

    @property
    def left(self) -> bool:
        return self.left_at is not None

    def silent_for(self, now: float) -> float:
        """Seconds since it was last heard from (0 once it left, or before it was heard)."""
        if self.left or self.last_heard is None:
            return 0.0
        return now - self.last_heard

    def heard(self, now: float) -> bool:
        """Alive and heard from within HEARD_SECONDS: reachable."""
        return (
            not self.left and self.last_heard is not None and self.silent_for(now) <= HEARD_SECONDS
        )

    def describe_silence(self, now: float) -> str:
        if self.left:
            return f"{self.name}: its link closed (it ended)"
        return (
            f"{self.name}: the launcher last heard from it {self.silent_for(now):.0f} s ago "
            "(its host cut off or dead)"
        )


def rank_member(rank: int, host: str, address: str, last_heard: Optional[float]) -> Member:
    """A rank's row: named 'rank 3 on h2 (198.18.0.12)'."""
    return Member(rank, f"rank {rank} on {host} ({address})", host, address, last_heard)


class MemberTable:
    """The rows, by key, behind one lock: the link's and the rendezvous' threads write,
    the launcher's loop reads copies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: Dict[Hashable, Member] = {}
        self._early: Dict[Hashable, Member] = {}  # said something before its hello

    def add(self, member: Member, now: float) -> None:
        """A member's hello: it is heard from now (what it said before is kept)."""
        with self._lock:
            early = self._early.pop(member.key, None)
            if early is not None:
                member = replace(
                    member,
                    status=early.status,
                    ended_at=early.ended_at,
                    phase=early.phase,
                    phase_since=early.phase_since,
                    started_mpi=early.started_mpi,
                )
            member.last_heard = now
            self._rows[member.key] = member

    def heard(self, key: Hashable, now: float) -> None:
        with self._lock:
            if key in self._rows:
                self._rows[key].last_heard = now

    def left(self, key: Hashable, now: float) -> None:
        """Its connection closed: it ended (a cut host's connection never closes)."""
        with self._lock:
            row = self._rows.get(key)
            if row is not None and row.left_at is None:
                row.left_at = now

    def ended(self, key: Hashable, status: int, now: float) -> None:
        """It reported its end with `status`."""
        with self._lock:
            row = self._row_or_early(key)
            row.status, row.ended_at = status, now
            row.phase, row.phase_since = Phase.ENDED, now

    def enter(self, key: Hashable, phase: Phase, now: float) -> None:
        """It said it entered `phase` (a member that ended stays ended)."""
        with self._lock:
            row = self._row_or_early(key)
            row.started_mpi = row.started_mpi or phase in (Phase.IN_MPI_START, Phase.RUNNING)
            if row.phase is not Phase.ENDED:
                row.phase, row.phase_since = phase, now

    def forget(self, keys: Iterable[Hashable]) -> None:
        with self._lock:
            for key in keys:
                self._rows.pop(key, None)
                self._early.pop(key, None)

    def rows(self) -> Dict[Hashable, Member]:
        """Copies of the members heard from, by key."""
        with self._lock:
            return {key: replace(row) for key, row in self._rows.items()}

    def said(self) -> Dict[Hashable, Member]:
        """Copies of every member that said something, heard from (hello) or not yet."""
        with self._lock:
            return {key: replace(row) for key, row in {**self._early, **self._rows}.items()}

    def _row_or_early(self, key: Hashable) -> Member:
        if key in self._rows:
            return self._rows[key]
        if key not in self._early:
            self._early[key] = Member(key, f"rank {key}", "", "")
        return self._early[key]

"""The restart policy every launch path uses (--restarts): one MPI job, -H group jobs and
groups --join-ed to a served job. How many times a failed job or lost group is started
again, how long after its loss, and how long its host has to answer again."""

from dataclasses import dataclass
from typing import Mapping, Optional

from .timing import host_return_seconds, restart_delay


@dataclass(frozen=True)
class Restarts:
    """`limit` restarts per group, each `delay` s after the loss (ps-lite gives a new node
    a dead one's place only once the scheduler has missed its heartbeats), its host
    answering within `host_wait` s after that or the group is given up."""

    limit: int
    delay: float
    host_wait: float

    def allows(self, attempt: int) -> bool:
        """Whether a member on its `attempt`-th start (0: the first) may start again."""
        return attempt < self.limit

    def describe(self, restart: int) -> str:
        """'restart 1 of 2'."""
        return f"restart {restart} of {self.limit}"

    @classmethod
    def for_job(cls, limit: int, environ: Mapping[str, str]) -> "Restarts":
        """The policy of a job with --restarts `limit` and the environment `environ`."""
        return cls(limit, restart_delay(environ), host_return_seconds())


class OneRejoin:
    """The one rejoin a parameter-server scheduler allows: ps-lite keeps its recovering
    nodes in a list it never clears (Van::Receiving's recovery_nodes) and checks that it
    holds one, so a second rejoin in one scheduler's life aborts it ('van.cc: Check
    failed: recovery_nodes->control.node.size() == 1 (2 vs. 1)') and every group with
    it. Held by whoever started the scheduler: GroupJobs for -H group jobs, the
    rendezvous for groups --join-ed to a served job (their launchers ask it)."""

    def __init__(self) -> None:
        self.rejoined: Optional[str] = None  # the group that used it

    def ask(self, group: str) -> Optional[str]:
        """None: `group` (as the user reads it) rejoins, and the grant is spent; else why
        it may not."""
        if self.rejoined is None:
            self.rejoined = group
            return None
        return (
            f"{self.rejoined} rejoined the servers once already, and ps-lite's scheduler "
            "takes one rejoining node in its life (a second aborts it, and every group with it)"
        )

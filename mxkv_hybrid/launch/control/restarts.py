"""The restart policy every launch path uses (--restarts): one MPI job, -H group jobs and
groups --join-ed to a served job. How many times a failed job or lost group is started
again, how long after its loss, and how long its host has to answer again."""

from dataclasses import dataclass
from typing import Mapping

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

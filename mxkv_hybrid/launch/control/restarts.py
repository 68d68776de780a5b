"""The restart policy every launch path uses (--restarts): how many times a lost group is
started again, how long after its loss, and how long its host has to answer again."""

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

    @classmethod
    def for_job(cls, limit: int, environ: Mapping[str, str]) -> "Restarts":
        """The policy of a job with --restarts `limit` and the environment `environ`."""
        return cls(limit, restart_delay(environ), host_return_seconds())

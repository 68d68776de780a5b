"""What the planner knows about a cluster: hosts, ranks, the two kinds of link, servers."""

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Link:
    """A link of `latency` seconds per message and `bandwidth` bytes per second."""

    latency: float
    bandwidth: float

    def seconds(self, nbytes: float, sharers: int = 1) -> float:
        """One message of `nbytes`, with `sharers` messages crossing the link at once."""
        return self.latency + nbytes * sharers / self.bandwidth


@dataclass(frozen=True)
class Cluster:
    """`hosts` x `ranks_per_host` ranks; a group is a host. `inside`: between two ranks of a
    host; `between`: a host's link to the other hosts, shared by its ranks when
    `shared_nic` (a host's network card, and the emulated link of MXKV_THROTTLE_*), one per
    rank otherwise (a card per rank). `servers` parameter-server processes (0: one per
    host), each with a link of its own: `server_link`, or `between` when None (the
    emulated link charges the leaders only, so a rehearsal on one machine gives its
    servers the inside link); or, `servers_beside`, all on one of the hosts (where
    mxkv-launch starts them), behind its link, with `server_link` (when given) their own
    throughput.
    `cores_per_host` < ranks_per_host: ranks share cores, so compute stretches."""

    hosts: int
    ranks_per_host: int
    inside: Link
    between: Link
    servers: int = 0
    shared_nic: bool = True
    servers_beside: bool = False
    server_link: Optional[Link] = None
    connection: Optional[Link] = None  # one worker's ps-lite connection to a server, when its
    #                                    own throughput (TCP, copies) is below the links'
    cores_per_host: float = 0  # 0: one core (or GPU) per rank; may be a share of a core

    @property
    def ranks(self) -> int:
        return self.hosts * self.ranks_per_host

    @property
    def link_of_servers(self) -> Link:
        return self.server_link or self.between

    @property
    def server_count(self) -> int:
        return self.servers or self.hosts

    @property
    def oversubscription(self) -> float:
        """How much slower a rank computes when every rank of a host computes at once."""
        if self.cores_per_host <= 0:
            return 1.0
        return max(1.0, self.ranks_per_host / self.cores_per_host)

    def crossing_sharers(self, ranks_crossing_per_host: int) -> int:
        """Messages on one host's link when that many of its ranks send across at once."""
        return ranks_crossing_per_host if self.shared_nic else 1

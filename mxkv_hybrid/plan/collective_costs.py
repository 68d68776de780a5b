"""Alpha-beta costs of the allreduce algorithms (csrc/) on ranks numbered host by host.

Each algorithm is a sequence of exchange steps in which every rank sends one message; a
step lasts as long as its slowest message: latency + bytes x sharers / bandwidth, where a
message between hosts shares its host's link with the host's other ranks that cross in the
same step (Cluster.crossing_sharers). For n bytes on p ranks, g per host:
  ring          2 (p - 1) steps of n / p; with more than one host every step crosses, one
                rank per host at a time;
  rhd           recursive halving then doubling: 2 log2 p steps of n/2, n/4, ... (and back),
                the steps at distance >= g cross with all g ranks of a host at once; p not a
                power of two adds two steps of n (the extra ranks fold in and out);
  rd            recursive doubling: log2 p steps of n, those at distance >= g cross;
  hierarchical  ring reduce-scatter inside the host (g - 1 steps of n / g), an allreduce of
                the n / g slice across hosts among the ranks holding it (any of the above on
                one rank per host, all g ranks of a host at once), ring allgather inside;
  mpi           modelled as rhd (MPICH's large-message allreduce).
Every cost also says the bytes the busiest rank sends inside its host and across hosts."""

import math
from dataclasses import dataclass
from typing import Callable, Dict

from .cluster import Cluster


@dataclass(frozen=True)
class Cost:
    seconds: float
    bytes_inside: float  # sent by the busiest rank, to ranks of its host
    bytes_across: float  # sent by the busiest rank, to other hosts

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(
            self.seconds + other.seconds,
            self.bytes_inside + other.bytes_inside,
            self.bytes_across + other.bytes_across,
        )


NOTHING = Cost(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Span:
    """The ranks an allreduce runs on: `ranks` in all, `per_host` of them on each host, and
    `concurrent` such allreduces running at once on every host's link (the hierarchical
    allreduce's slices)."""

    ranks: int
    per_host: int
    concurrent: int = 1

    @property
    def hosts(self) -> int:
        return self.ranks // self.per_host


def _step(cluster: Cluster, nbytes: float, crosses: bool, crossing_per_host: int) -> Cost:
    if crosses:
        sharers = cluster.crossing_sharers(crossing_per_host)
        return Cost(cluster.between.seconds(nbytes, sharers), 0.0, nbytes)
    return Cost(cluster.inside.seconds(nbytes), nbytes, 0.0)


def ring(nbytes: float, span: Span, cluster: Cluster) -> Cost:
    if span.ranks < 2:
        return NOTHING
    one = _step(cluster, nbytes / span.ranks, span.hosts > 1, span.concurrent)
    steps = 2 * (span.ranks - 1)
    return Cost(steps * one.seconds, steps * one.bytes_inside, steps * one.bytes_across)


def _recursive(nbytes: float, span: Span, cluster: Cluster, halving: bool) -> Cost:
    """rhd (halving: messages n/2, n/4, ... then back) or rd (every message n)."""
    if span.ranks < 2:
        return NOTHING
    levels = int(math.log2(span.ranks))
    power = 2**levels
    total = NOTHING
    for j in range(levels):
        distance = power >> (j + 1) if halving else 1 << j
        message = nbytes / 2 ** (j + 1) if halving else nbytes
        total = total + _step(
            cluster, message, distance >= span.per_host, span.per_host * span.concurrent
        )
    if halving:
        total = total + total  # the allgather mirrors the reduce-scatter
    if power != span.ranks:  # the extra ranks fold in before and out after
        fold = _step(cluster, nbytes, span.hosts > 1, span.concurrent)
        total = total + fold + fold
    return total


def rhd(nbytes: float, span: Span, cluster: Cluster) -> Cost:
    return _recursive(nbytes, span, cluster, halving=True)


def rd(nbytes: float, span: Span, cluster: Cluster) -> Cost:
    return _recursive(nbytes, span, cluster, halving=False)


ALGORITHMS: Dict[str, Callable[[float, Span, Cluster], Cost]] = {
    "ring": ring,
    "rhd": rhd,
    "rd": rd,
    "mpi": rhd,
}


def hierarchical(nbytes: float, span: Span, cluster: Cluster, across: str) -> Cost:
    """Reduce-scatter inside each host, `across` on the slices (every rank of a host its
    own slice, at once), allgather inside."""
    scatter = ring(nbytes, Span(span.per_host, span.per_host), cluster)
    half = Cost(scatter.seconds / 2, scatter.bytes_inside / 2, 0.0)  # reduce-scatter = allgather
    slices = ALGORITHMS[across](nbytes / span.per_host, Span(span.hosts, 1, span.per_host), cluster)
    return half + slices + half

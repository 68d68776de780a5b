"""Predicted step of each mode on a Cluster, from the alpha-beta costs of collective_costs.

A Workload is the model (its arrays' sizes), the compute time of one batch on one rank
alone (forward + backward) and of one optimizer update of the whole model. Gradients
travel in the fused buckets the collectives make (arrays below the bucket size packed
together, larger ones alone), each bucket by the algorithm the table (MXKV_ALGO=auto)
gives for its size and rank count, or the cheapest one (`algorithm="best"`).
Per step, with c = compute x oversubscription, u = update x oversubscription, n = bytes,
and o (every mode) the store's own cost a step (calls, hooks; CPU work, so it stretches
with oversubscription like compute), if known:
  allreduce      c + sum over buckets of the allreduce (flat, or hierarchical) + u
  sync           c + the allreduce inside the host + the leader's push and pull of n to the
                 servers, in batches whose pulls cross while the next batch is pushed
                 (n + one batch f over the slowest of its link and a server's, 2 n over
                 its ps-lite connection), every group's at once: at least as long as the
                 links they share carry all of them (each server's link G (n + f) / S each
                 way; servers beside one host's ranks, its link the other G - 1 leaders')
                 + u / S on the servers + a broadcast of n inside the host
  async          as sync, the servers applying its own push on its path (u / S); groups do
                 not wait for each other and exchange at their own times, so a leader's
                 path has its own exchange only, and the links they share bound the step
                 by what they carry of every group (n each way a leader: one's pipeline
                 fill is another's data); the servers update once per push (G u / S, in
                 the CPU bound)
  easgd tau      c + the allreduce inside the host + u + one elastic exchange every tau steps:
                 ps: the leader pulls n and pushes n, pipelined and bound as async's; rma:
                 it reads and adds the (G-1)/G of n (and of f) the other leaders hold,
                 pipelined alike, and, on a host with no spare core, serves the others'
                 reads and adds of its chunk (the same bytes through TCP, CPU work); then a
                 broadcast inside
  lasgd tau      c + u + o + an allreduce A of the weights over all ranks every tau steps, on
                 a communication thread beside the next tau steps (W = tau (c + u + o)).
                 With a core to spare for it, only what exceeds W shows. On a host with no
                 spare core (cores given, not more than its ranks) the thread, waiting in
                 MPI (which spins), takes half of the rank's share of the cores for as long
                 as the average lasts, D: A, or its CPU work at that half share if longer
                 (the same allreduce on the inside link: copies and sums; and the bytes it
                 moves across hosts, in and out through TCP); D / 2 shows, or D - W if more.
TCP's CPU work (the kernel's copies) is taken at the ps-lite connection's rate, when given.
Waiting: a step whose collective waits for every rank (allreduce, sync) pays w_world, one
that waits for its group only (async, easgd) w_group: the slowest rank's lateness beyond
the compute above (stragglers; on a host with fewer cores than ranks, the waiting ranks'
spinning too). lasgd meets every tau steps and pays d + (w_world - d) / tau a step: d is
the drift, the share of w_world that ranks lose a step by progressing at unequal rates,
which adds up between meetings (0 by default: all of w_world is paid per meeting). Given
(--straggler-ms) or measured (examples/benchmarks/planner_validation.py); 0 by default.
Shared cores (cores_per_host given): ranks that wait for each other inside MPI spin there,
so a host's ranks in lockstep compute as slowly as the oversubscription says (c and u
above). A rank that is one host's only rank in a parameter-server mode (sync, async, easgd
over ps) waits in ps-lite without spinning: while it waits the other processes on the
cores run faster, so its step is the larger of its own path (compute and update not
stretched) and the host's CPU work a step over its cores: the ranks' compute and local
update, the host's share of the servers' updates, and the leader's ps-lite traffic at the
connection's rate (copies through TCP are CPU work).
With overlap (MXKV_OVERLAP=1, mode allreduce) the allreduce hides behind backward, taken
as 2/3 of c. Scaling efficiency: (compute + update of one rank alone) / step."""

from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence

from ..capabilities import ALLREDUCE, ASYNC, EASGD, LASGD, SYNC
from ..comm import algorithm_table
from ..comm.dtype_codes import DTYPE_CODES
from ..comm.pacing import PACE_BYTES, pace_batches
from .cluster import Cluster, Link
from .collective_costs import ALGORITHMS, NOTHING, Cost, Span, hierarchical

BACKWARD_SHARE = 2 / 3  # of forward + backward: what overlap can hide behind


@dataclass(frozen=True)
class Workload:
    array_bytes: Sequence[int]  # every gradient array's size in bytes
    compute_seconds: float  # forward + backward of one batch, one rank alone
    update_seconds: float = 0.0  # the optimizer's update of the whole model, one rank alone
    overhead_seconds: float = 0.0  # the store's own cost a step (hooks, calls), one rank
    # what a step costs beyond compute when it waits for every rank / for its group only
    # (stragglers; waiting ranks spinning on shared cores)
    world_wait_seconds: float = 0.0
    group_wait_seconds: float = 0.0
    # of world_wait_seconds, what ranks lose a step by progressing at unequal rates (adds
    # up between meetings, so meeting every tau steps saves none of it)
    drift_seconds: float = 0.0
    bucket_bytes: int = 1 << 20  # MXKV_BUCKET_MB

    @property
    def model_bytes(self) -> int:
        return int(sum(self.array_bytes))

    def fill_bytes(self, nbytes: float) -> float:
        """Of an exchange of `nbytes` in paced batches (comm/pacing.py), what crosses one
        direction of a link while the other is idle: the largest batch (all of it when
        the model is one batch: its reads, then its writes)."""
        batches = pace_batches(self.array_bytes, PACE_BYTES)
        return min(nbytes, max(sum(self.array_bytes[i] for i in b) for b in batches))

    def buckets(self) -> List[int]:
        """Sizes in bytes of the fused buckets the collectives make of the float32 arrays
        (csrc/bucket_plan.h: consecutive arrays below the bucket size packed up to it,
        larger arrays alone)."""
        from ..comm import _C

        tensors = [(DTYPE_CODES["float32"], -(-nbytes // 4)) for nbytes in self.array_bytes]
        return [4 * n for n in _C.bucket_elements(tensors, self.bucket_bytes)]


@dataclass(frozen=True)
class Prediction:
    configuration: str
    mode: str
    step_seconds: float
    compute_seconds: float  # forward + backward + update, as stretched on this cluster
    communication_seconds: float  # what the step spends beyond compute
    bytes_inside: float  # per step, sent by the busiest rank to its host
    bytes_across: float  # per step, sent by the busiest rank (or leader) to other hosts
    server_bytes: float  # per step, in and out of each server
    efficiency: float  # against one rank alone
    synchronous: bool  # the same step as one process on the union of the batches


class Planner:
    """Predictions of every configuration for one workload on one cluster."""

    def __init__(
        self,
        workload: Workload,
        cluster: Cluster,
        table: Optional[Dict[int, list]] = None,
        overlap: bool = False,
    ):
        """table: the algorithm table ({ranks: [(max bytes or -1, algorithm)]}); None: the
        cheapest algorithm for every bucket."""
        self.workload = workload
        self.cluster = cluster
        self._table = table
        self._overlap = overlap

    # ---- building blocks -------------------------------------------------------------
    def algorithm_for(self, nbytes: float, span: Span) -> str:
        """The table's algorithm for a bucket of `nbytes` on `span` (its rules for the
        nearest rank count), or the cheapest one."""
        if self._table is None:
            return min(
                ("ring", "rhd", "rd"),
                key=lambda a: ALGORITHMS[a](nbytes, span, self.cluster).seconds,
            )
        rules = algorithm_table.rules_for(self._table, span.ranks)
        return next(name for limit, name in rules if limit == -1 or nbytes <= limit)

    def allreduce(self, span: Span, hierarchy: bool = False) -> Cost:
        """The gradients' allreduce over `span`, bucket by bucket."""
        total = NOTHING
        for bucket in self.workload.buckets():
            if hierarchy and span.hosts > 1 and span.per_host > 1:
                # under the table (auto) the step across groups takes the ring, as the
                # collectives do (csrc/tensor_collectives.h)
                across = (
                    "ring"
                    if self._table is not None
                    else self.algorithm_for(bucket / span.per_host, Span(span.hosts, 1))
                )
                total = total + hierarchical(bucket, span, self.cluster, across)
            else:
                name = self.algorithm_for(bucket, span)
                total = total + ALGORITHMS[name](bucket, span, self.cluster)
        return total

    def _broadcast_inside(self, nbytes: float) -> Cost:
        """A pipelined broadcast from the leader to its host's ranks."""
        if self.cluster.ranks_per_host < 2:
            return NOTHING
        return Cost(self.cluster.inside.seconds(nbytes), nbytes, 0.0)

    def _servers(self, nbytes: float, beside: bool = False, together: bool = True) -> Cost:
        """A leader pushes and pulls `nbytes` in paced batches (comm/pacing.py), a batch's
        pulls crossing while the next batch is pushed: on a link, n and one batch (the
        pipeline's fill and drain) over the slowest of the leader's link and a server's;
        2 n over its ps-lite connection (copies through TCP: CPU work both ways).
        `together`: every group's exchange at once (sync), so it lasts as long as the
        links the groups share carry all of them (_shared_links of n and a batch); apart
        (async, easgd), what they carry is a bound on the cycle instead. `beside`: the
        leader of the host beside the servers, which reaches them without its link."""
        cluster = self.cluster
        piped = nbytes + self.workload.fill_bytes(nbytes)  # a leader's, on a link
        links = ([] if beside else [cluster.between]) + self._server_links()
        if not links and not cluster.connection:
            return NOTHING
        leader = max(
            [link.seconds(piped) for link in links]
            + ([2 * cluster.connection.seconds(nbytes)] if cluster.connection else [])
        )
        if together:
            leader = max(leader, self._shared_links(piped, beside))
        return Cost(leader, 0.0, 2 * nbytes)

    def _server_links(self) -> List[Link]:
        """The servers' own links: server_link, or `between` for servers on hosts of their
        own; none known for servers beside ranks without server_link."""
        cluster = self.cluster
        if cluster.servers_beside:
            return [cluster.server_link] if cluster.server_link else []
        return [cluster.link_of_servers]

    def _shared_links(self, nbytes: float, beside: bool = False) -> float:
        """How long the busiest link the groups share takes to carry `nbytes` each way for
        every leader crossing it: each server's link, the G leaders' over S; servers beside
        one host's ranks, that host's link, the other G - 1 leaders' (not on the path of
        `beside`, that host's own leader)."""
        cluster = self.cluster
        busy = [
            link.seconds(nbytes * cluster.hosts / cluster.server_count)
            for link in self._server_links()
        ]
        if cluster.servers_beside and not beside:
            busy.append(cluster.between.seconds(nbytes * (cluster.hosts - 1)))
        return max(busy, default=0.0)

    def _spare_core(self) -> bool:
        """Whether a host has a core beyond its ranks' (or cores were not given)."""
        cluster = self.cluster
        return cluster.cores_per_host <= 0 or cluster.cores_per_host > cluster.ranks_per_host

    def _tcp_work(self, nbytes: float) -> float:
        """The CPU time of moving `nbytes` in and out through TCP (the kernel's copies), at
        the ps-lite connection's rate (0 when not given)."""
        connection = self.cluster.connection
        return nbytes / connection.bandwidth if connection else 0.0

    def _stretch(self, spinning: bool = True) -> float:
        """How much slower a rank computes: the oversubscription when its host's ranks wait
        for each other spinning in MPI (or are not alone), 1 for a host's only rank that
        waits in ps-lite (the CPU bound covers what it shares)."""
        if spinning or self.cluster.ranks_per_host > 1:
            return self.cluster.oversubscription
        return 1.0

    def _cpu_bound(
        self, local_update: float, server_update: float = 0.0, ps_bytes: float = 0.0
    ) -> float:
        """A step's CPU work on one host over its cores (0 when cores are not given): its
        ranks' compute and `local_update` (a rank's, alone), its share of the servers'
        `server_update` (all servers' work a step), its leader's `ps_bytes` of ps-lite
        traffic a step at the connection's rate."""
        cluster, workload = self.cluster, self.workload
        if cluster.cores_per_host <= 0:
            return 0.0
        work = (
            cluster.ranks_per_host * (workload.compute_seconds + local_update)
            + server_update / cluster.hosts
            + self._tcp_work(ps_bytes)
        )
        return work / cluster.cores_per_host

    def _prediction(
        self,
        configuration: str,
        mode: str,
        update: float,
        communication: Cost,
        synchronous: bool,
        server_bytes: float = 0.0,
        hidden: float = 0.0,
        wait: float = 0.0,
        spinning: bool = True,
        bound: float = 0.0,
    ) -> Prediction:
        """update: a rank's share of the optimizer's work on its step's path, alone; bound:
        the step's throughput bound (a host's cores, the links the groups share)."""
        stretch = self._stretch(spinning)
        compute = self.workload.compute_seconds * stretch
        update *= stretch
        overhead = self.workload.overhead_seconds * stretch
        exposed = max(0.0, communication.seconds - hidden) + overhead + wait
        step = max(compute + update + exposed, bound)
        alone = self.workload.compute_seconds + self.workload.update_seconds
        return Prediction(
            configuration,
            mode,
            step,
            compute + update,
            step - compute - update,
            communication.bytes_inside,
            communication.bytes_across,
            server_bytes,
            alone / step,
            synchronous,
        )

    # ---- the modes ---------------------------------------------------------------------
    def predictions(self, taus: Sequence[int] = (4, 16)) -> List[Prediction]:
        cluster, n = self.cluster, self.workload.model_bytes
        world = Span(cluster.ranks, cluster.ranks_per_host)
        host = Span(cluster.ranks_per_host, cluster.ranks_per_host)
        update = self.workload.update_seconds
        compute = self.workload.compute_seconds * self._stretch()  # a rank in lockstep's
        hidden = BACKWARD_SHARE * compute if self._overlap else 0.0
        flat = self.allreduce(world)
        everyone = self.workload.world_wait_seconds
        group = self.workload.group_wait_seconds if cluster.ranks_per_host > 1 else 0.0
        rows = [
            self._prediction(
                "allreduce, flat", ALLREDUCE, update, flat, True, hidden=hidden, wait=everyone
            )
        ]
        if cluster.hosts > 1 and cluster.ranks_per_host > 1:
            hierarchical = self.allreduce(world, hierarchy=True)
            rows.append(
                self._prediction(
                    "allreduce, hierarchical",
                    ALLREDUCE,
                    update,
                    hierarchical,
                    True,
                    hidden=hidden,
                    wait=everyone,
                )
            )
        if cluster.hosts > 1:
            per_server = 2 * n * cluster.hosts / cluster.server_count
            inside = self.allreduce(host)
            through_servers = inside + self._servers(n) + self._broadcast_inside(n)
            rows.append(
                self._prediction(
                    SYNC,
                    SYNC,
                    update / cluster.server_count,
                    through_servers,
                    True,
                    per_server,
                    wait=everyone,
                    spinning=False,
                    bound=self._cpu_bound(0.0, update, 2 * n),
                )
            )
            async_update = update / cluster.server_count  # its own push's, on its path

            def own(beside: bool) -> Cost:
                """A group's exchange through the servers, alone (groups apart)."""
                return self._servers(n, beside, together=False) + self._broadcast_inside(n)

            def asynchronous(beside: bool) -> Prediction:
                return self._prediction(
                    ASYNC,
                    ASYNC,
                    async_update,
                    inside + own(beside),
                    False,
                    per_server,
                    wait=group,
                    spinning=False,
                    bound=max(
                        self._cpu_bound(0.0, update * cluster.hosts, 2 * n),
                        self._shared_links(n, beside),
                    ),
                )

            rows.append(self._apart(asynchronous))
            share = (cluster.hosts - 1) / cluster.hosts  # of the centre, the other leaders'
            remote = n * share
            # a holder serves the others' reads and adds of its chunk (2 (G-1)/G n through
            # TCP, in MPI's progress), with no spare core in its rank's time
            serving = 0.0 if self._spare_core() else self._tcp_work(2 * remote)
            rma = Cost(
                cluster.between.seconds(remote + share * self.workload.fill_bytes(n)) + serving,
                0.0,
                2 * remote,
            ) + self._broadcast_inside(n)
            for tau in taus:

                def elastic(beside: bool, tau: int = tau) -> Prediction:
                    exchange = _every(own(beside), tau)
                    return self._prediction(
                        f"easgd tau={tau} (ps)",
                        EASGD,
                        update,
                        inside + exchange,
                        False,
                        per_server / tau,
                        wait=group,
                        spinning=False,
                        bound=max(
                            self._cpu_bound(update, 0.0, 2 * n / tau),
                            self._shared_links(n, beside) / tau,
                        ),
                    )

                rows.append(self._apart(elastic))
                rows.append(
                    self._prediction(
                        f"easgd tau={tau} (rma)",
                        EASGD,
                        update,
                        inside + _every(rma, tau),
                        False,
                        0.0,
                        wait=group,
                    )
                )
        rows += self._local_sgd(taus, flat, world)
        return rows

    def _apart(self, predict: Callable[[bool], Prediction]) -> Prediction:
        """A mode whose groups progress apart, each at its own rate, through the servers:
        `predict(beside)` for a group beside the servers or not. With the servers beside one
        host's ranks, that host's group does not cross its link and runs ahead: a step is
        then the harmonic mean of the groups' (the job's steps a second, per rank)."""
        across = predict(False)
        if not self.cluster.servers_beside:
            return across
        hosts = self.cluster.hosts
        step = hosts / (1 / predict(True).step_seconds + (hosts - 1) / across.step_seconds)
        alone = self.workload.compute_seconds + self.workload.update_seconds
        return replace(
            across,
            step_seconds=step,
            communication_seconds=step - across.compute_seconds,
            efficiency=alone / step,
        )

    def _local_sgd(self, taus: Sequence[int], average: Cost, world: Span) -> List[Prediction]:
        """lasgd: the weights' allreduce (the model's bytes, as flat moves them over `world`)
        every tau steps, on a communication thread beside the next tau steps (W: tau
        (c + u + o), stretched). With a spare core it runs there: what exceeds W shows.
        Without one its thread, waiting in MPI (which spins), takes half of the rank's
        share of the cores for as long as it lasts (D: the allreduce, or its CPU work at
        that half share if longer): D / 2 shows, or D - W when longer. The drift is paid
        every step, the rest of the world wait once every tau."""
        cluster, workload = self.cluster, self.workload
        stretch = self._stretch()
        step = (
            workload.compute_seconds + workload.update_seconds + workload.overhead_seconds
        ) * stretch
        duration, taken = average.seconds, 0.0
        if not self._spare_core():
            on_inside = Planner(workload, replace(cluster, between=cluster.inside), self._table)
            cpu_work = on_inside.allreduce(world).seconds + self._tcp_work(2 * average.bytes_across)
            duration = max(duration, 2 * stretch * cpu_work)
            taken = duration / 2
        drift = min(workload.drift_seconds, workload.world_wait_seconds)
        rows = []
        for tau in taus:
            shown = Cost(
                max(taken, duration - tau * step), average.bytes_inside, average.bytes_across
            )
            wait = drift + (workload.world_wait_seconds - drift) / tau
            rows.append(
                self._prediction(
                    f"lasgd tau={tau}",
                    LASGD,
                    workload.update_seconds,
                    _every(shown, tau),
                    False,
                    wait=wait,
                )
            )
        return rows


def _every(cost: Cost, tau: int) -> Cost:
    """A cost paid once every `tau` steps, per step."""
    return Cost(cost.seconds / tau, cost.bytes_inside / tau, cost.bytes_across / tau)


def scaling(
    workload: Workload, cluster: Cluster, hosts: Sequence[int], **options
) -> Dict[int, List[Prediction]]:
    """Predictions for the same cluster at each host count."""
    return {h: Planner(workload, replace(cluster, hosts=h), **options).predictions() for h in hosts}

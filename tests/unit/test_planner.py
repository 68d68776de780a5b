"""The planner's cost model (mxkv_hybrid.plan), in one process: closed forms of the
algorithms and modes, the bytes the C++ counted in the hierarchy benchmark, shared links,
cores and servers, and the recommendation."""

import json
from dataclasses import replace

import pytest

from mxkv_hybrid.comm import algorithm_table
from mxkv_hybrid.plan.cluster import Cluster, Link
from mxkv_hybrid.plan.collective_costs import ALGORITHMS, Span, hierarchical
from mxkv_hybrid.plan.mode_costs import Planner, Workload
from mxkv_hybrid.plan.model_sizes import array_bytes

from support.paths import RESULTS


def test_fused_buckets_pack_small_arrays_and_leave_large_ones_alone():
    workload = Workload([100, 2 << 20, 600 << 10, 600 << 10], 0.0, bucket_bytes=1 << 20)
    assert sorted(workload.buckets()) == sorted([2 << 20, 100 + (600 << 10), 600 << 10])


N = 8 * 2**20


INSIDE, BETWEEN = Link(1e-5, 1e9), Link(1e-3, 1e8)


def two_by_two(shared_nic: bool = False) -> Cluster:
    return Cluster(2, 2, INSIDE, BETWEEN, shared_nic=shared_nic)


def test_the_ring_on_one_host_is_two_steps_of_half_the_bytes():
    cost = ALGORITHMS["ring"](N, Span(2, 2), two_by_two())
    assert cost.seconds == pytest.approx(2 * (1e-5 + N / 2 / 1e9))
    assert (cost.bytes_inside, cost.bytes_across) == (N, 0)


def test_recursive_halving_doubling_crosses_hosts_in_its_largest_steps():
    """4 ranks, 2 a host: the distance-2 step (n/2 each way) crosses, the distance-1 one
    (n/4) stays inside."""
    cost = ALGORITHMS["rhd"](N, Span(4, 2), two_by_two())
    assert cost.bytes_across == N and cost.bytes_inside == N / 2
    assert cost.seconds == pytest.approx(2 * (1e-3 + N / 2 / 1e8) + 2 * (1e-5 + N / 4 / 1e9))


def test_a_shared_network_card_slows_the_steps_all_ranks_of_a_host_cross_at_once():
    alone, shared = (ALGORITHMS["rd"](N, Span(4, 2), two_by_two(s)).seconds for s in (False, True))
    assert shared - alone == pytest.approx(N / 1e8)  # one crossing step, two messages on one link


def test_the_hierarchical_allreduce_sends_a_slice_across():
    """Each rank of a host allreduces its 1/g slice across hosts: ring over 2 hosts sends
    the slice once; inside, a ring reduce-scatter and allgather."""
    cost = hierarchical(N, Span(4, 2), two_by_two(), "ring")
    assert cost.bytes_across == N / 2 and cost.bytes_inside == N


@pytest.fixture(scope="module")
def resnet50() -> list:
    return array_bytes("resnet50_v1")


@pytest.mark.parametrize(
    "method, rules, hierarchy",
    [("flat", None, False), ("flat_ring", [(-1, "ring")], False), ("hierarchical", None, True)],
)
def test_the_bytes_across_are_those_the_collectives_counted(resnet50, method, rules, hierarchy):
    """The hierarchy benchmark's busiest rank (4 ranks in 2 groups, the ResNet-50 set, the
    shipped table), counted by the C++ at every exchange step: the model's bytes match."""
    measured = next(
        r
        for r in json.loads((RESULTS / "hierarchy.json").read_text())["results"]
        if r["method"] == method
    )
    table = {4: rules} if rules else algorithm_table.load(algorithm_table.SHIPPED)
    planner = Planner(Workload(resnet50, 0.0), two_by_two(), table)
    predicted = planner.allreduce(Span(4, 2), hierarchy=hierarchy)
    assert predicted.bytes_across == pytest.approx(max(measured["bytes_across_per_rank"]), rel=1e-6)


def test_behind_a_slow_link_the_hierarchical_allreduce_is_recommended(resnet50):
    cluster = Cluster(2, 2, INSIDE, Link(0.0, 1000e6 / 8), shared_nic=False)
    rows = Planner(Workload(resnet50, 0.05), cluster).predictions()
    best = min((r for r in rows if r.synchronous), key=lambda r: r.step_seconds)
    assert best.configuration == "allreduce, hierarchical"
    flat = next(r for r in rows if r.configuration == "allreduce, flat")
    assert flat.step_seconds > 1.5 * best.step_seconds


def test_averaging_every_tau_steps_sends_a_tau_th_of_the_bytes(resnet50):
    """easgd's group allreduce stays inside the host; only the exchanges cross."""
    rows = {
        r.configuration: r
        for r in Planner(Workload(resnet50, 0.05), two_by_two()).predictions(taus=(4, 16))
    }
    for mode in ("lasgd tau={}", "easgd tau={} (ps)", "easgd tau={} (rma)"):
        every_16 = rows[mode.format(16)].bytes_across
        assert rows[mode.format(4)].bytes_across == pytest.approx(4 * every_16)
        assert rows[mode.format(16)].bytes_across > 0


def _steps(workload: Workload, cluster: Cluster) -> dict:
    return {r.configuration: r.step_seconds for r in Planner(workload, cluster).predictions((4,))}


def test_waiting_is_paid_by_the_scope_each_mode_waits_for():
    """The world wait every step where every rank waits (allreduce, sync), a tau-th of it in
    lasgd; the group wait in async and easgd, whose groups do not wait for each other."""
    base = Workload([N], 0.05, 0.01)
    plain = _steps(base, two_by_two())
    waited = _steps(
        Workload([N], 0.05, 0.01, world_wait_seconds=0.004, group_wait_seconds=0.001), two_by_two()
    )
    extra = {name: waited[name] - plain[name] for name in plain}
    for name in ("allreduce, flat", "allreduce, hierarchical", "sync"):
        assert extra[name] == pytest.approx(0.004)
    for name in ("async", "easgd tau=4 (ps)", "easgd tau=4 (rma)"):
        assert extra[name] == pytest.approx(0.001)
    assert extra["lasgd tau=4"] == pytest.approx(0.001)
    drifting = _steps(
        Workload([N], 0.05, 0.01, world_wait_seconds=0.004, drift_seconds=0.002), two_by_two()
    )  # the drift adds up between meetings: paid every step
    assert drifting["lasgd tau=4"] - plain["lasgd tau=4"] == pytest.approx(0.002 + 0.002 / 4)


def test_lasgd_hides_its_average_behind_the_next_steps_but_not_its_cpu_work_without_a_spare_core():
    """2 hosts of 2 ranks: the average (a flat allreduce of the weights every tau steps)
    hides behind tau x (c + u + o) as on a core of its own. With one core per rank its CPU
    work (the same allreduce on the inside link) cannot hide; with a spare core it does."""
    c, u, o, tau = 0.05, 0.01, 0.002, 4
    window = tau * (c + u + o)
    workload = Workload([N], c, u, overhead_seconds=o)

    def lasgd(between: Link, cores: float) -> float:
        return _steps(
            workload, Cluster(2, 2, INSIDE, between, shared_nic=False, cores_per_host=cores)
        )["lasgd tau=4"]

    fast, slow = Link(0.0, 5e8), Link(0.0, 1e7)
    planner = Planner(workload, Cluster(2, 2, INSIDE, slow, shared_nic=False))
    cpu_work = (
        Planner(workload, Cluster(2, 2, INSIDE, INSIDE, shared_nic=False))
        .allreduce(Span(4, 2))
        .seconds
    )
    average = planner.allreduce(Span(4, 2)).seconds
    assert (
        average
        > window
        > Planner(workload, Cluster(2, 2, INSIDE, fast, shared_nic=False))
        .allreduce(Span(4, 2))
        .seconds
    )
    # a fast link: all of the average hides, unless no core is spare for its CPU work
    assert lasgd(fast, 3) == pytest.approx(c + u + o)
    assert lasgd(fast, 0) == pytest.approx(c + u + o)  # cores not given: as if spare
    assert lasgd(fast, 2) == pytest.approx(c + u + o + cpu_work / tau)
    # a slow link: what exceeds the window shows either way
    for cores in (0, 2, 3):
        assert lasgd(slow, cores) == pytest.approx(c + u + o + (average - window) / tau)


def test_a_slow_parameter_server_connection_bounds_the_leaders_transfers():
    """A leader pushes and pulls n over the slowest of its link and the server's (one
    batch here: pushed, then pulled, 2 n at one latency) and 2 n over its ps-lite
    connection; on async's path the servers apply its own push (u / S, as sync's once a
    step); the other groups' updates share the servers' cores (the CPU bound), not its path."""
    workload = Workload([N], 0.05, 0.01)
    slow = Cluster(2, 2, INSIDE, BETWEEN, shared_nic=False, servers=2, connection=Link(0.0, 1e7))
    fast = Cluster(2, 2, INSIDE, BETWEEN, shared_nic=False, servers=2)
    delay = _steps(workload, slow)["sync"] - _steps(workload, fast)["sync"]
    assert delay == pytest.approx(2 * N / 1e7 - (1e-3 + 2 * N / 1e8))
    steps = _steps(workload, fast)
    assert steps["async"] == pytest.approx(steps["sync"])


def test_pushes_and_pulls_in_batches_cross_a_link_both_ways_at_once():
    """Ten arrays of 4 MiB travel in batches of 8 MiB (PACE_BYTES), a batch's pulls crossing
    while the next is pushed: a leader's link carries n and one batch, l + (n + 8 MiB) / B,
    not a push then a pull, 2 (l + n / B); easgd over rma reads and adds its (G - 1) / G of
    both alike, once every tau steps."""
    mib = 2**20
    workload = Workload([4 * mib] * 10, 0.05, 0.0)
    steps = _steps(workload, Cluster(2, 1, INSIDE, BETWEEN, servers=2))
    assert steps["sync"] - 0.05 == pytest.approx(1e-3 + 48 * mib / 1e8)
    assert steps["easgd tau=4 (rma)"] - 0.05 == pytest.approx((1e-3 + 24 * mib / 1e8) / 4)


def test_a_holder_with_no_spare_core_pays_for_serving_the_others_through_tcp():
    """easgd over rma, 2 hosts of one rank on one core each: a holder serves the other
    leader's read and add of its half of the centre (2 n / 2 through TCP, at the ps-lite
    connection's rate) in its own rank's time, once every tau steps; with a spare core
    (two a host) it does not show."""
    workload = Workload([N], 0.05, 0.0)
    tight = Cluster(2, 1, INSIDE, BETWEEN, servers=1, cores_per_host=1, connection=Link(0.0, 1e9))
    rma = "easgd tau=4 (rma)"
    assert _steps(workload, tight)[rma] - _steps(workload, replace(tight, connection=None))[
        rma
    ] == pytest.approx(N / 1e9 / 4)
    spare = replace(tight, cores_per_host=2)
    assert _steps(workload, spare)[rma] == pytest.approx(
        _steps(workload, replace(spare, connection=None))[rma]
    )


def test_servers_beside_the_ranks_of_a_host_share_its_link_with_only_the_others_crossing():
    """3 hosts of 1 rank, 1 server, a model of one batch (pushed, then pulled): on a host
    of its own the server's link carries every leader's push and pull (2 G n = 6 n);
    beside the ranks of h1 only the other two leaders' (2 (G-1) n = 4 n), unless ps-lite's
    own throughput is the slower."""
    workload = Workload([N], 0.05, 0.0)
    apart = Cluster(3, 1, INSIDE, BETWEEN, servers=1)
    beside = replace(apart, servers_beside=True)
    slow_server = replace(beside, server_link=Link(0.0, 1e7))
    assert _steps(workload, apart)["sync"] - 0.05 == pytest.approx(1e-3 + 6 * N / 1e8)
    assert _steps(workload, beside)["sync"] - 0.05 == pytest.approx(1e-3 + 4 * N / 1e8)
    assert _steps(workload, slow_server)["sync"] - 0.05 == pytest.approx(2 * 3 * N / 1e7)


def test_groups_apart_beside_the_servers_run_ahead_and_the_step_is_the_harmonic_mean():
    """async and easgd over ps, the servers beside h1's ranks: h1's group reaches them
    without its link (here: at no cost), h2's pays it; the job's step a rank is the harmonic
    mean of the two groups' (2 / (1/c + 1/(c + l + 2 n / B)): one batch, pushed then
    pulled). Sync waits for h2."""
    c = 0.05
    beside = Cluster(2, 1, INSIDE, BETWEEN, servers=1, servers_beside=True)
    steps = _steps(Workload([N], c, 0.0), beside)
    across = c + 1e-3 + 2 * N / 1e8
    assert steps["async"] == pytest.approx(2 / (1 / c + 1 / across))
    assert steps["easgd tau=4 (ps)"] == pytest.approx(2 / (1 / c + 1 / (c + (across - c) / 4)))
    assert steps["sync"] == pytest.approx(across)


def test_on_shared_cores_a_rank_waiting_in_ps_lite_is_bound_by_the_cpu_work_not_stretched():
    """3 hosts of one rank sharing 2 cores (2/3 of a core each): ranks in an MPI collective
    spin, so their compute stretches 1.5x; easgd over ps waits in ps-lite, so its step is
    the larger of its unstretched path and the host's CPU work (compute, update, a tau-th
    of its 2 n of ps-lite traffic at the connection's rate) over its 2/3 of a core."""
    c, u, connection = 0.05, 0.01, Link(0.0, 1e9)
    workload = Workload([N], c, u)
    shared = Cluster(3, 1, INSIDE, INSIDE, servers=1, cores_per_host=2 / 3, connection=connection)
    steps = _steps(workload, shared)
    alone = _steps(workload, replace(shared, cores_per_host=0))
    assert steps["allreduce, flat"] - alone["allreduce, flat"] == pytest.approx(0.5 * (c + u))
    assert steps["easgd tau=4 (ps)"] == pytest.approx((c + u + 2 * N / 1e9 / 4) * 1.5)
    assert alone["easgd tau=4 (ps)"] < steps["easgd tau=4 (ps)"]
    # a path longer than the CPU work: the path, with compute not stretched
    slow = replace(shared, server_link=Link(0.0, 1e7))
    assert _steps(workload, slow)["sync"] == pytest.approx(
        _steps(workload, replace(slow, cores_per_host=0))["sync"]
    )


def test_lasgd_without_a_spare_core_gives_half_the_core_to_the_average_while_it_lasts():
    """2 hosts of 2 ranks on 2 cores each: the thread averaging beside the next tau steps
    waits in MPI, which spins, so for as long as the average lasts (A, when longer than
    twice its CPU work K) the steps run at half speed: A / 2 shows (A < 2 W); with a third
    core it all hides."""
    c, u, o, tau = 0.05, 0.01, 0.002, 4
    workload = Workload([N], c, u, overhead_seconds=o)
    between = Link(0.0, 5e7)
    average = (
        Planner(workload, Cluster(2, 2, INSIDE, between, shared_nic=False))
        .allreduce(Span(4, 2))
        .seconds
    )
    cpu_work = (
        Planner(workload, Cluster(2, 2, INSIDE, INSIDE, shared_nic=False))
        .allreduce(Span(4, 2))
        .seconds
    )
    assert 2 * cpu_work < average < 2 * tau * (c + u + o)

    def lasgd(cores: float) -> float:
        return _steps(
            workload, Cluster(2, 2, INSIDE, between, shared_nic=False, cores_per_host=cores)
        )["lasgd tau=4"]

    assert lasgd(2) == pytest.approx(c + u + o + average / 2 / tau)
    assert lasgd(3) == pytest.approx(c + u + o)


def test_groups_apart_are_bound_by_what_the_shared_link_carries_not_charged_it_each():
    """async, 3 hosts of 1 rank, the server beside h1's: ten 4 MiB arrays (n = 40 MiB,
    batches of 8 MiB). A group on h2 or h3 crosses its link with its own exchange only
    (l + (n + 8 MiB) / B, the groups exchanging at their own times), but h1's link carries
    both of theirs, 2 n each way, so neither can step faster than l + 2 n / B; h1's group
    reaches the server without a link. The job's step: the harmonic mean. Sync exchanges
    at once: its path carries both, l + 2 (n + 8 MiB) / B."""
    mib, c = 2**20, 0.01
    workload = Workload([4 * mib] * 10, c, 0.0)
    cluster = Cluster(3, 1, INSIDE, BETWEEN, servers=1, servers_beside=True)
    steps = _steps(workload, cluster)
    own, shared = c + 1e-3 + 48 * mib / 1e8, 1e-3 + 80 * mib / 1e8
    assert shared > own
    assert steps["async"] == pytest.approx(3 / (1 / c + 2 / shared))
    assert steps["sync"] == pytest.approx(c + 1e-3 + 96 * mib / 1e8)

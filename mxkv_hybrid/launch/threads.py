"""OpenMP threads per process where the user sets none: never more than MXNet's own default
(half the host's processors, its guess at the physical cores), and no more than the cores
of the launching host shared by the most ranks any one host runs; at least 1.

MXNet gives every process half the host's processors, so that R ranks on a host of P
processors run R x P / 2 threads; ranks that wait for each other in MPI poll, and past the
cores the polling takes the cores the other ranks' threads compute on. Measured on 2
cores (docs/performance/training-step.md): with 2 threads a process a sync step between
2 emulated hosts took 1.09-1.45x of dist_sync's time, with 1 thread 0.59-0.60x. The
user's OMP_NUM_THREADS always wins."""

import os

from .launch_plan import LaunchPlan

VARIABLE = "OMP_NUM_THREADS"


def most_ranks_on_a_host(plan: LaunchPlan) -> int:
    """The most ranks any host runs: the largest -H / --hostfile slot count, or every rank
    where there are no hosts (all on this one)."""
    slots = [count for _, count in plan.host_slots()]
    return max(slots) if slots else max(1, plan.num_ranks)


def threads_per_process(plan: LaunchPlan) -> int:
    """The threads for each process of `plan` (threads_for its busiest host)."""
    return threads_for(most_ranks_on_a_host(plan))


def threads_for(ranks_on_a_host: int) -> int:
    """min(MXNet's default, this host's cores over `ranks_on_a_host`), at least 1."""
    cores = len(os.sched_getaffinity(0))  # those this process may run on
    return max(1, min(cores // 2, cores // ranks_on_a_host))


def describe(plan: LaunchPlan) -> str:
    """The launcher's line about the rule, naming how to choose otherwise."""
    return (
        f"mxkv-launch: {VARIABLE}={threads_per_process(plan)} for every rank and server "
        f"({len(os.sched_getaffinity(0))} cores here, {most_ranks_on_a_host(plan)} rank(s) "
        f"on the busiest host, at most MXNet's half of the cores; set {VARIABLE} to choose)"
    )

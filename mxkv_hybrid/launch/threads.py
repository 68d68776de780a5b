"""OpenMP threads per process where the user sets none: the cores of the launching host
shared by the most ranks any one host runs, at least 1.

MXNet otherwise gives every process as many OpenMP threads as the host has cores, and ranks
that wait for each other in MPI poll: on a host with fewer cores than ranks x threads, the
polling takes the cores the other ranks' threads compute on (a sync step between 2
emulated hosts went from 0.59x of dist_sync's time to 1.09-1.45x with 2 threads a process
on 2 cores: docs/performance/training-step.md). The user's OMP_NUM_THREADS always wins."""

import os

from .launch_plan import LaunchPlan

VARIABLE = "OMP_NUM_THREADS"


def most_ranks_on_a_host(plan: LaunchPlan) -> int:
    """The most ranks any host runs: the largest -H / --hostfile slot count, or every rank
    where there are no hosts (all on this one)."""
    slots = [count for _, count in plan.host_slots()]
    return max(slots) if slots else max(1, plan.num_ranks)


def threads_per_process(plan: LaunchPlan) -> int:
    """This host's cores (those this process may run on) over the most ranks on a host."""
    return max(1, len(os.sched_getaffinity(0)) // most_ranks_on_a_host(plan))


def describe(plan: LaunchPlan) -> str:
    """The launcher's line about the rule, naming how to choose otherwise."""
    return (
        f"mxkv-launch: {VARIABLE}={threads_per_process(plan)} for every rank and server "
        f"({len(os.sched_getaffinity(0))} cores here / {most_ranks_on_a_host(plan)} rank(s) "
        f"on the busiest host; set {VARIABLE} to choose)"
    )

"""`mxkv-launch -n N [--servers S ...] --check`: a self-test of the installation and the
topology, run by every rank (`python -m mxkv_hybrid.self_check`). Rank 0 prints what it
found: MPI, the ranks per host, the groups, whether the parameter servers answer, that a
small and a 4 MiB pushpull give the right numbers on every rank (with their times and
algorithms), the algorithm table, and the knobs that are set."""

import os
import time
from typing import List

import mxnet as mx
import numpy as np

from .capabilities import capabilities_of, steps_together
from .comm import algorithm_table
from .comm.topology import groups, world
from .config import KNOBS, Config

SIZES = (256, 1 << 20)  # floats: 1 KiB and 4 MiB


def _size_text(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def _mpi_line(hosts: List[str]) -> str:
    from mpi4py import MPI

    levels = {
        MPI.THREAD_SINGLE: "SINGLE",
        MPI.THREAD_FUNNELED: "FUNNELED",
        MPI.THREAD_SERIALIZED: "SERIALIZED",
        MPI.THREAD_MULTIPLE: "MULTIPLE",
    }
    library = " ".join(MPI.Get_library_version().splitlines()[0].split())
    per_host = {host: hosts.count(host) for host in dict.fromkeys(hosts)}
    layout = ", ".join(f"{host} ({count})" for host, count in per_host.items())
    return (
        f"{library}; thread level MPI_THREAD_{levels.get(MPI.Query_thread(), '?')}; "
        f"{len(hosts)} rank(s) on {len(per_host)} host(s): {layout}"
    )


def _combined_ranks(config: Config) -> List[int]:
    """The ranks whose values a pushpull of a value that is not a weight combines: all,
    or with separate group jobs in modes async and easgd this group's."""
    this = world()
    if this.spans_all_ranks or steps_together(config.mode, config.easgd_sync):
        return list(range(this.size))
    return [this.rank - this.comm.Get_rank() + r for r in range(this.comm.Get_size())]


def _groups_line(config: Config) -> str:
    if not capabilities_of(config.mode).servers:
        return f"none (mode {config.mode}: one allreduce over all ranks)"
    these = groups(config.group_size)
    job = world().group_job
    if job is not None:
        return (
            f"group {job.group} of {job.groups} as its own MPI job: ranks {job.first_rank}-"
            f"{job.first_rank + world().comm.Get_size() - 1} of {job.ranks}; leader (talks to "
            f"the servers): rank {job.first_rank}"
        )
    leaders = world().comm.gather(world().rank if these.is_leader else None, root=0)
    shown = [r for r in leaders or [] if r is not None]
    size = f"{config.group_size} ranks each" if config.group_size else "one per host"
    return f"{these.num_groups} group(s), {size}; leaders (talk to the servers): ranks {shown}"


def _check_pushpull(store, config: Config) -> List[str]:
    """pushpull of rank + 1 at each size; every rank checks the result."""
    this = world()
    combined = _combined_ranks(config)
    total = sum(rank + 1 for rank in combined)
    expected = total  # the store sums, as every MXNet store does
    lines = []
    for floats in SIZES:
        value = mx.nd.full((floats,), this.rank + 1, dtype="float32")
        store.pushpull(f"mxkv-check/{floats}", value)  # first call: buckets and servers set up
        value[:] = this.rank + 1
        started = time.perf_counter()
        store.pushpull(f"mxkv-check/{floats}", value)
        result = value.asnumpy()
        seconds = time.perf_counter() - started
        wrong = this.comm.allgather(bool(np.abs(result - expected).max() > 1e-6 * expected))
        first = this.rank - this.comm.Get_rank()
        bad = [first + rank for rank, is_wrong in enumerate(wrong) if is_wrong]
        algorithm = ""
        if capabilities_of(config.mode).gradients_allreduced:
            algorithm = f", algorithm {store._collectives.algorithm_for('float32', floats * 4)}"
        over = "" if len(combined) == this.size else f" (combined over ranks {combined})"
        verdict = f"correct on every rank{over}" if not bad else f"WRONG on ranks {bad}"
        lines.append(f"{_size_text(floats * 4)}: {verdict}, {seconds * 1e3:.2f} ms{algorithm}")
    return lines


def _table_line(config: Config) -> str:
    if config.algorithm != "auto":
        return f"MXKV_ALGO={config.algorithm} (no table)"
    path = config.algorithm_table or algorithm_table.default_path()
    rules = algorithm_table.rules_for(algorithm_table.load(path), world().size)
    shown = ", ".join(
        f"{'up to ' + _size_text(limit) if limit >= 0 else 'larger'}: {name}"
        for limit, name in rules
    )
    return f"auto from {path} ({shown})"


def main() -> None:
    started = time.monotonic()
    this = world()
    config = Config.from_environment()
    hosts = this.comm.allgather(this.host)
    store = mx.kv.create("hybrid")
    report = [("MPI", _mpi_line(hosts)), ("mode", config.mode), ("groups", _groups_line(config))]
    if capabilities_of(config.mode).servers:
        servers = os.environ.get("DMLC_NUM_SERVER", "?")
        report.append(("servers", f"{servers} server(s) answered (the group leaders connected)"))
    report += [("pushpull", line) for line in _check_pushpull(store, config)]
    report.append(("algorithms", _table_line(config)))
    knobs = [f"{name}={os.environ[name]}" for name in KNOBS if name in os.environ]
    report.append(("knobs set", ", ".join(knobs) or "none (all defaults)"))
    store.close()
    if this.comm.Get_rank() == 0:  # rank 0, or the leader of each group's own MPI job
        ok = all("WRONG" not in line for _, line in report)
        took = time.monotonic() - started
        report.append(("result", f"{'OK' if ok else 'FAILED'} in {took:.2f} s"))
        print(
            "mxkv_hybrid self-check\n"
            + "\n".join(f"  {name + ':':<12}{line}" for name, line in report),
            flush=True,
        )
        if not ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()

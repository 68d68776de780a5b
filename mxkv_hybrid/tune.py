"""Calibrates MXKV_ALGO=auto on this machine and rank count:

    mxkv-launch -n 4 -- python -m mxkv_hybrid.tune [--out PATH] [--quick]

Times MPI_Allreduce and the ring, rhd and rd algorithms on float32 vectors from 1 KiB to
128 MiB (the slowest rank's time, median of several repetitions), prints a table, and saves
the fastest algorithm per size as the rules for this rank count in the algorithm table
(default ~/.cache/mxkv_hybrid/allreduce_table.json, which auto then reads on this machine).
"""

import argparse
import functools
import socket
import time
from typing import Dict, List

import numpy as np
from mpi4py import MPI

from .comm import algorithm_table
from .comm.collectives import TensorCollectives
from .config import Config

ALGORITHMS = ("mpi", "ring", "rhd", "rd")
TIE = 0.03
RD_LIMIT = 16 << 20  # recursive doubling sends log2(p) whole vectors: never the best above this


def sizes(quick: bool) -> List[int]:
    """1 KiB, 4 KiB, ... 64 MiB (every other one when quick), and 128 MiB."""
    powers_of_four = [1 << (10 + 2 * i) for i in range(0, 9, 2 if quick else 1)]
    return powers_of_four + [128 << 20]


def repetitions(nbytes: int, quick: bool) -> int:
    reps = 30 if nbytes <= (1 << 20) else 10 if nbytes <= (16 << 20) else 5
    return max(3, reps // 3) if quick else reps


def median_seconds(comm, run, reps: int) -> float:
    """Median over repetitions of the slowest rank's time (after one warm-up call)."""
    run()
    times = []
    for _ in range(reps):
        comm.Barrier()
        start = time.perf_counter()
        run()
        times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
    return float(np.median(times))


def measure(comm, config: Config, quick: bool) -> Dict[int, Dict[str, float]]:
    """{bytes: {algorithm: median seconds}}; rank 0 prints a progress line per size."""
    collectives = TensorCollectives(comm, config)
    results = {}
    for nbytes in sizes(quick):
        vector = np.ones(nbytes // 4, dtype=np.float32)
        row: Dict[str, float] = {}
        for algorithm in ALGORITHMS:
            if algorithm == "rd" and nbytes > RD_LIMIT:
                continue
            reduce = functools.partial(
                collectives.allreduce_vector, vector, algorithm, 1.0 / comm.size
            )
            row[algorithm] = median_seconds(comm, reduce, repetitions(nbytes, quick))
        results[nbytes] = row
        if comm.rank == 0:
            cells = "  ".join(f"{a} {t * 1e3:8.3f}" for a, t in row.items())
            print(f"{nbytes:>11} B  {cells}  ms  -> {min(row, key=row.__getitem__)}", flush=True)
    return results


def rules_from(results: Dict[int, Dict[str, float]]) -> algorithm_table.Rules:
    """The fastest algorithm per measured size, as (max bytes, algorithm) rules. Where the
    algorithm of the previous size is within TIE of the fastest, it is kept (no flapping
    between near-equal algorithms on measurement noise)."""
    rules: algorithm_table.Rules = []
    for nbytes in sorted(results):
        times = results[nbytes]
        best = min(times, key=times.__getitem__)
        if rules and rules[-1][1] in times and times[rules[-1][1]] <= times[best] * (1 + TIE):
            best = rules[-1][1]
        if rules and rules[-1][1] == best:
            rules[-1] = (nbytes, best)
        else:
            rules.append((nbytes, best))
    rules[-1] = (-1, rules[-1][1])
    return rules


def build_parser() -> argparse.ArgumentParser:
    """The tuner's flags (the docs' flag page is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="python -m mxkv_hybrid.tune",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        default=algorithm_table.SAVED,
        help="table to add this rank count's rules to (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    comm = MPI.COMM_WORLD
    config = Config.from_environment()
    if comm.rank == 0:
        print(
            f"tuning the allreduce on {comm.size} ranks (segments of "
            f"{config.segment_bytes >> 10} KiB) ...",
            flush=True,
        )
    results = measure(comm, config, args.quick)
    if comm.rank == 0:
        rules = rules_from(results)
        hosts = sorted(set(comm.gather(socket.gethostname()) or []))
        algorithm_table.save(args.out, comm.size, rules, machine=", ".join(hosts))
        print(f"rules for {comm.size} ranks: {rules}", flush=True)
        print(f"saved in {args.out}", flush=True)
    else:
        comm.gather(socket.gethostname())


if __name__ == "__main__":
    main()

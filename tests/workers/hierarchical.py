"""The hierarchical allreduce against a float64 reference and against the flat allreduce, on
this job's ranks in groups of argv[1]: every algorithm across groups, float32/float64/
float16/bfloat16, float32 compressed to fp16/bf16, sizes 0, 1, primes and counts not
divisible by the ranks; whole calls of several keys with two per-device inputs
(algorithms.py's). Results must be bit-identical on every rank; the bytes each rank sends
across groups must be what the algorithm sends (ring across groups: 2 (G-1)/G of this
rank's slice), and behind the emulated link a call lasts at least as long as those bytes
need. Rank 0 prints `CHECKED <n>`; any failure raises (the job fails)."""

import dataclasses
import sys
import time

from mxkv_hybrid.comm.collectives import TensorCollectives
from mxkv_hybrid.comm.topology import groups

import algorithms
from algorithms import ALGORITHMS, base, check, comm, p, sizes, values

group_size = int(sys.argv[1])
this_group = groups(group_size)
g, G = this_group.group_comm.size, this_group.num_groups


def collectives(
    algorithm: str,
    hierarchy: str,
    compress: str = "none",
    bucket_bytes: int = 1 << 20,
    mbps: float = 0,
):
    config = dataclasses.replace(
        base, algorithm=algorithm, compress=compress, bucket_bytes=bucket_bytes, throttle_mbps=mbps
    )
    return TensorCollectives(comm, config, this_group, hierarchy=hierarchy)


def check_vectors():
    for algorithm in ALGORITHMS:
        hierarchical, flat = collectives(algorithm, "on"), collectives(algorithm, "off")
        assert hierarchical.hierarchical and not flat.hierarchical
        for dtype in ("float32", "float64", "float16", "bfloat16"):
            for n in sizes():
                x = values(n, n, dtype)
                got, reference = x.copy(), x.copy()
                hierarchical.allreduce_vector(got, algorithm, 1.0 / p)
                flat.allreduce_vector(reference, algorithm, 1.0 / p)
                check(f"hierarchical {algorithm} {dtype} n={n}", got, x, dtype, dtype, 1.0 / p)
                check(f"flat {algorithm} {dtype} n={n}", reference, x, dtype, dtype, 1.0 / p)
        if algorithm == "mpi":
            continue
        for wire, code in (("float16", "fp16"), ("bfloat16", "bf16")):
            compressed = collectives(algorithm, "on", compress=code)
            for n in sizes():
                x = values(n, n + 1, "float32")
                got = x.copy()
                compressed.allreduce_vector(got, algorithm, 1.0)
                check(
                    f"hierarchical {algorithm} float32 as {wire} n={n}",
                    got,
                    x,
                    "float32",
                    wire,
                    1.0,
                )


def check_bytes_across():
    """A ring across groups sends 2 (G-1)/G of the slice a rank holds (1/g of the vector)."""
    n = 6 * g * G * 1000  # every block and slice whole
    tc = collectives("ring", "on")
    x = values(n, 5, "float32")
    tc.allreduce_vector(x, "ring")
    slice_bytes = 4 * n // g
    expected = 2 * (G - 1) * slice_bytes // G
    assert tc.bytes_sent_across == expected, (tc.bytes_sent_across, expected)
    inside = 2 * (g - 1) * 4 * n // g  # reduce-scatter and allgather inside the group
    assert tc.bytes_sent_inside == inside, (tc.bytes_sent_inside, inside)


def check_the_link_charges_what_crosses():
    """Behind an emulated 8 Mbit/s link, an allreduce takes at least the time its bytes
    across need on this rank's link (a lower bound: the C++ sleeps out each step)."""
    n = 6 * g * G * 1000
    for hierarchy in ("on", "off"):
        tc = collectives("ring", hierarchy, mbps=8)
        x = values(n, 6, "float32")
        started = time.monotonic()
        tc.allreduce_vector(x, "ring")
        elapsed = time.monotonic() - started
        assert elapsed >= tc.bytes_sent_across / 1e6, (hierarchy, elapsed, tc.bytes_sent_across)
        assert hierarchy == "off" or tc.bytes_sent_across > 0


check_vectors()
check_bytes_across()
check_the_link_charges_what_crosses()
algorithms.check_whole_calls(  # many buckets: the pipelined stages
    lambda algorithm, bucket_bytes: collectives(algorithm, "on", bucket_bytes=bucket_bytes),
    "hierarchical ",
)
algorithms.check_whole_calls(
    lambda algorithm, bucket_bytes: collectives(
        "ring" if algorithm == "mpi" else algorithm, "on", "bf16", bucket_bytes
    ),
    "hierarchical as bfloat16 ",
    "bfloat16",
)

if comm.rank == 0:
    print(f"CHECKED {algorithms.checked} in {G} groups of {g}")

"""Every allreduce algorithm against a float64 reference on this job's rank count: sizes 0,
1, primes and counts not divisible by the ranks; float32/float64/float16/bfloat16; float32
compressed to fp16/bf16; tiny segments (many in flight; up to 997 elements: the 65537 of
the default segments sent 4096 of them a rank and doubled the check's time) and the
default; whole calls of several keys with several per-device inputs. Results must be
bit-identical on every rank. Rank 0 prints `CHECKED <n>`; any failure raises (the job
fails)."""

import dataclasses

import mxnet as mx
import numpy as np
from mpi4py import MPI

from mxkv_hybrid.comm.collectives import TensorCollectives
from mxkv_hybrid.config import Config

ALGORITHMS = ["mpi", "ring", "rhd", "rd"]
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53, "float16": 2.0**-11, "bfloat16": 2.0**-8}
comm = MPI.COMM_WORLD
p, rank = comm.size, comm.rank
base = Config.from_environment()
checked = 0


def collectives(algorithm: str, compress: str = "none", segment_bytes: int = 1 << 20):
    return TensorCollectives(
        comm,
        dataclasses.replace(
            base, algorithm=algorithm, compress=compress, segment_bytes=segment_bytes
        ),
    )


def to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def values(n: int, seed: int, dtype: str) -> np.ndarray:
    """This rank's input: normal values, exactly representable in the storage type."""
    x = np.random.default_rng(seed * 7919 + rank).standard_normal(n).astype(np.float32)
    if dtype == "bfloat16":
        return to_bfloat16_bits(x)
    return x.astype(dtype)


def as_float64(x: np.ndarray, dtype: str) -> np.ndarray:
    return from_bfloat16_bits(x).astype(np.float64) if dtype == "bfloat16" else x.astype(np.float64)


def check(label: str, got: np.ndarray, inputs: np.ndarray, dtype: str, wire: str, scale: float):
    """got (this rank's result) vs scale * float64 sum of everyone's inputs, within
    2 (p + 1) u |x| summed over ranks, u the unit roundoff of the coarser of dtype and wire;
    and bit-identical to rank 0's result."""
    global checked
    everyone = np.array(comm.allgather(as_float64(inputs, dtype)))
    reference = everyone.sum(axis=0) * scale
    u = max(UNIT_ROUNDOFF[dtype], UNIT_ROUNDOFF[wire])
    bound = 2 * (p + 1) * u * np.abs(everyone).sum(axis=0) * scale + 1e-30
    error = np.abs(as_float64(got, dtype) - reference)
    worst = int(np.argmax(error / bound)) if got.size else 0
    assert np.all(error <= bound), (
        f"{label}: element {worst}: {as_float64(got, dtype)[worst]} "
        f"vs reference {reference[worst]} (bound {bound[worst]:.3g})"
    )
    first = comm.bcast(got.tobytes() if rank == 0 else None, root=0)
    assert got.tobytes() == first, f"{label}: result differs from rank 0's"
    checked += 1


def sizes(segment_bytes: int = 1 << 20):
    """Counts to reduce: edge cases, primes, counts not divisible by the ranks; with tiny
    segments the largest is left out (997 already puts many segments in flight)."""
    edges = [0, 1, 2, 3, p - 1, p + 1, 13, 997, 4 * p + 3]
    return edges if segment_bytes < 1024 else edges + [65537]


def check_vectors():
    for algorithm in ALGORITHMS:
        for segment_bytes in (64, 1 << 20):
            plain = collectives(algorithm, segment_bytes=segment_bytes)
            for dtype in ("float32", "float64", "float16", "bfloat16"):
                for n in sizes(segment_bytes):
                    x = values(n, n, dtype)
                    got = x.copy()
                    plain.allreduce_vector(got, algorithm, 1.0 / p)
                    check(
                        f"{algorithm} seg={segment_bytes} {dtype} n={n}",
                        got,
                        x,
                        dtype,
                        dtype,
                        1.0 / p,
                    )
            if algorithm == "mpi":
                continue
            for wire, code in (("float16", "fp16"), ("bfloat16", "bf16")):
                compressed = collectives(algorithm, compress=code, segment_bytes=segment_bytes)
                for n in sizes(segment_bytes):
                    x = values(n, n + 1, "float32")
                    got = x.copy()
                    compressed.allreduce_vector(got, algorithm, 1.0)
                    check(
                        f"{algorithm} seg={segment_bytes} float32 as {wire} n={n}",
                        got,
                        x,
                        "float32",
                        wire,
                        1.0,
                    )


def check_whole_calls(make=None, label: str = "", wire: str = "float32"):
    """Several keys, two per-device inputs each, fused and in-place buckets (bucket 1 KiB);
    make(algorithm, bucket_bytes) builds the collectives (default: flat over the world),
    whose values travel as `wire`."""
    shapes = [(3,), (5, 7), (300,), (1,), (2000,), (17, 19)]
    for algorithm in ALGORITHMS + ["auto"]:
        tc = (
            make(algorithm, 1024)
            if make
            else TensorCollectives(
                comm, dataclasses.replace(base, algorithm=algorithm, bucket_bytes=1024)
            )
        )
        inputs, outputs, expected = [], [], []
        for k, shape in enumerate(shapes):
            count = int(np.prod(shape))
            a, b = values(count, 100 + k, "float32"), values(count, 200 + k, "float32")
            inputs.append(
                [mx.nd.array(a.reshape(shape)), mx.nd.array(b.reshape(shape), ctx=mx.cpu(1))]
            )
            outputs.append([mx.nd.zeros(shape), mx.nd.zeros(shape, ctx=mx.cpu(1))])
            expected.append((a.astype(np.float64) + b).astype(np.float32))
        tc.allreduce("pushpull", list(range(len(shapes))), inputs, outputs, average=True)
        for k in range(len(shapes)):
            got = [o.asnumpy().ravel() for o in outputs[k]]
            assert got[0].tobytes() == got[1].tobytes(), f"{algorithm} key {k}: devices differ"
            check(
                f"{label}{algorithm} call key {k}",
                got[0],
                expected[k],
                "float32",
                wire,
                1.0 / p,
            )


if __name__ == "__main__":
    check_vectors()
    check_whole_calls()
    if rank == 0:
        print(f"CHECKED {checked}")

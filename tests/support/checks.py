"""Comparisons of what ranks wrote, made outside the store under test: identical on every
rank, equal to a reference, the checks a worker printed."""

import re
from pathlib import Path
from typing import Dict, List

import numpy as np

from support.jobs import Job


def load_ranks(directory: Path, num_ranks: int) -> List[Dict[str, np.ndarray]]:
    return [dict(np.load(directory / f"rank{r}.npz")) for r in range(num_ranks)]


def assert_identical_across_ranks(weights: List[Dict[str, np.ndarray]]) -> None:
    for rank, mine in enumerate(weights[1:], start=1):
        assert mine.keys() == weights[0].keys()
        for name in mine:
            assert np.array_equal(mine[name], weights[0][name]), (
                f"{name}: rank {rank} differs from rank 0 (max |diff| "
                f"{np.abs(mine[name] - weights[0][name]).max():.3g})"
            )


def assert_matches_reference(mine: Dict[str, np.ndarray], reference: Dict[str, np.ndarray]) -> None:
    assert mine.keys() == reference.keys()
    for name in mine:
        np.testing.assert_allclose(
            mine[name],
            reference[name],
            rtol=1e-4,
            atol=1e-6,
            err_msg=f"{name} differs from the single-process reference",
        )


def assert_checks_passed(job: Job, num_ranks: int, expected: int) -> None:
    """A worker's `CHECK <name> ok|FAILED` lines: `expected` of them on every rank, all ok."""
    assert job.returncode == 0, job.output
    for rank in range(num_ranks):
        checks = [line for line in job.lines_of(rank) if line.startswith("CHECK")]
        assert len(checks) == expected, job.output
        assert all(line.endswith(" ok") for line in checks), "\n".join(checks)


def rank_files(directory: Path, ranks) -> Dict[int, Dict[str, np.ndarray]]:
    """Each rank's rank<r>.npz in `directory`."""
    return {r: dict(np.load(directory / f"rank{r}.npz")) for r in ranks}


def assert_same_on_every_rank(found: Dict[int, Dict[str, np.ndarray]], prefix: str) -> None:
    """The arrays named `prefix`... are equal, bit for bit, in every rank's file."""
    first = min(found)
    names = [n for n in found[first] if n.startswith(prefix)]
    assert names
    for rank, arrays in found.items():
        for name in names:
            assert np.array_equal(arrays[name], found[first][name]), (
                f"{name}: rank {rank} differs from rank {first}"
            )


def bytes_across(output: str) -> float:
    """KiB per step across groups, from the first summary line."""
    line = next(line for line in output.splitlines() if "summary" in line)
    figure = re.search(r"and ([\d.]+) KiB across groups", line)
    assert figure, line
    return float(figure.group(1))


def trained_weights(prefix: Path, epoch: int) -> dict:
    """The trained (arg:) parameters of a do_checkpoint file; BatchNorm statistics stay per rank."""
    import mxnet as mx  # (only where a test reads checkpoints)

    saved = mx.nd.load(f"{prefix}-{epoch:04d}.params")
    return {name: array.asnumpy() for name, array in saved.items() if name.startswith("arg:")}


def assert_checkpoints_identical(prefix: Path, epoch: int) -> None:
    rank0 = trained_weights(prefix, epoch)
    rank1 = trained_weights(Path(f"{prefix}-1"), epoch)  # do_checkpoint's per-rank prefix
    assert rank0.keys() == rank1.keys() and rank0
    for name in rank0:
        assert np.array_equal(rank0[name], rank1[name]), f"{name} differs between the ranks"

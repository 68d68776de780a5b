"""What every cell of the client matrix (tests/tables/client_matrix.py) checks, on one host
or across emulated hosts: the job ends well, every rank's last validation accuracy is far
above chance, and the exchange happened: in the modes of one model the ranks' trained
weights are identical (each rank reads another half of the data, so alone they differ:
tests/jobs/test_unmodified_scripts.py's control), in the others the store sent bytes between
the ranks after the warm-up."""

import re
from pathlib import Path
from typing import Dict, List

from support.checks import assert_checkpoints_identical
from support.jobs import Job
from tables.client_matrix import ONE_MODEL, Client

# Chance is 0.1 (10 classes); each rank validates on its 80 images, whose accuracy estimate
# has a std of at most 0.056: 0.3 is 3.6 std above chance. Seen: 0.57-0.85 (2 contexts in
# lasgd: at chance before its device copies were averaged as one model).
ABOVE_CHANCE = 0.3


SENT = re.compile(
    r"([\d.]+) (B|KiB|MiB|GiB) sent inside groups and ([\d.]+) (B|KiB|MiB|GiB) across"
)


def knobs(mode: str) -> Dict[str, str]:
    """The environment of a cell in `mode`: the mode (every other knob at its default) and
    a summary every 10 steps."""
    return {"MXKV_MODE": mode, "MXKV_SUMMARY_EVERY": "10"}


def accuracies(matrix_client: Client, job: Job, rank: int) -> List[float]:
    """Each epoch's validation accuracy, as the client printed it."""
    pattern = (
        r"\[client\] epoch=\d+ .*validation-accuracy=([0-9.]+)"
        if matrix_client.kind == "gluon"
        else r"Epoch\[\d+\] Validation-accuracy=([0-9.]+)"
    )
    return [float(m.group(1)) for line in job.lines_of(rank) if (m := re.search(pattern, line))]


def bytes_sent_last(job: Job) -> float:
    """What the store sent (inside and across groups) in the last summary of rank 0."""
    units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    found = [m for line in job.lines_of(0) if (m := SENT.search(line))]
    assert found, job.output
    last = found[-1]
    return float(last.group(1)) * units[last.group(2)] + float(last.group(3)) * units[last.group(4)]


def assert_trained_together(matrix_client: Client, mode: str, job: Job, out: Path) -> None:
    assert job.returncode == 0, job.output
    for rank in range(2):
        seen = accuracies(matrix_client, job, rank)
        assert len(seen) == matrix_client.epochs and seen[-1] > ABOVE_CHANCE, (
            rank,
            seen,
            job.output,
        )
    if mode not in ONE_MODEL:
        assert bytes_sent_last(job) > 0, job.output
    elif matrix_client.kind == "module":
        assert_checkpoints_identical(out / "model", matrix_client.epochs)
    else:
        digests = [re.findall(r"weights=(\w+)", "\n".join(job.lines_of(r))) for r in range(2)]
        assert len(digests[0]) == matrix_client.epochs and digests[0] == digests[1], job.output

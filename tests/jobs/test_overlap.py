"""MXKV_OVERLAP=1 (buckets reduced behind MXNet's engine while backward runs) trains to the
same bits as the blocking path, on every rank, with Gluon and Module."""

import re

import numpy as np
import pytest

from support.checks import assert_identical_across_ranks, load_ranks
from support.warm_ranks import launch_in


def train(warm_ranks, job_dir, script, num_ranks, options, overlap):
    out = job_dir / f"{script}-overlap{overlap}"
    job = launch_in(
        warm_ranks, num_ranks, script, "--out", str(out), *options, env={"MXKV_OVERLAP": overlap}
    )
    assert job.returncode == 0, job.output
    used = [
        int(found.group(1))
        for r in range(num_ranks)
        for line in job.lines_of(r)
        for found in [re.search(r"overlapped_buckets=(\d+)", line)]
        if found
    ]
    assert len(used) == num_ranks and all((n > 0) == (overlap == "1") for n in used), job.output
    weights = load_ranks(out, num_ranks)
    assert_identical_across_ranks(weights)
    return weights[0]


@pytest.mark.parametrize(
    "script, num_ranks, options",
    [
        ("train_gluon.py", 2, ["--kvstore", "string", "--update-on-kvstore", "0"]),
        (
            "train_gluon.py",
            3,
            ["--kvstore", "instance", "--devices", "2", "--update-on-kvstore", "0"],
        ),
        ("train_gluon.py", 2, ["--kvstore", "string"]),  # weights kept by the store
        ("train_module.py", 2, ["--devices", "2"]),
    ],
)
def test_overlapped_training_equals_the_blocking_path_bitwise(
    warm_ranks, job_dir, script, num_ranks, options
):
    blocking = train(warm_ranks, job_dir, script, num_ranks, options, "0")
    overlapped = train(warm_ranks, job_dir, script, num_ranks, options, "1")
    assert blocking.keys() == overlapped.keys()
    for name in blocking:
        assert np.array_equal(blocking[name], overlapped[name]), name

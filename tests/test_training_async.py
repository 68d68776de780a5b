"""MXKV_MODE=async: 4 ranks in 2 groups, asynchronous to each other through real dist_async
servers that hold the weights and the optimizer."""
import re

import numpy as np
import pytest

from conftest import launch, load_ranks

ASYNC = {"MXKV_MODE": "async"}
TARGET_LOSS = 1e-3  # from 7.19 at zero weights; the noise floor of the data is 5e-5


@pytest.mark.parametrize("servers", [1, 2])
def test_async_groups_reach_the_optimum_of_a_convex_problem(job_dir, servers):
    job = launch(4, "train_convex.py", str(job_dir), "200", env=ASYNC,
                 launcher_options=["--group-size", "2", "--servers", str(servers)])
    assert job.returncode == 0, job.output
    for rank in range(4):
        found = re.search(r"group-final loss ([0-9.e-]+)", "\n".join(job.lines_of(rank)))
        assert found and float(found.group(1)) < TARGET_LOSS, job.output
    weights = load_ranks(job_dir, 4)
    for first, second in ((0, 1), (2, 3)):  # synchronous inside a group
        for name in weights[first]:
            assert np.array_equal(weights[first][name], weights[second][name]), name


def test_async_refuses_updates_on_the_workers(job_dir):
    job = launch(2, "train_gluon.py", "--out", str(job_dir), "--update-on-kvstore", "0",
                 env=ASYNC, launcher_options=["--group-size", "1", "--servers", "1"], timeout=90)
    assert job.returncode != 0
    assert "MXKV_MODE=async applies the updates on the parameter servers" in job.output, job.output

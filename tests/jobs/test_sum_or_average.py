"""Sum or average (docs/guides/batches-and-gradients.md). The store's own calls sum, as every
MXNet store does (tests/workers/store_api.py checks it in every mode). Through the hooks,
gradients are averaged by default (MXKV_AVERAGE=1), which is what Module gets from MXNet's
dist_sync; MXKV_AVERAGE=0 sums them, which is what gluon.Trainer gets from dist_sync. Each
test trains the same 2 workers' batches under MXNet's dist_sync (a real ps-lite job, 1
server) and under the hybrid store, and compares the weights; the other setting of
MXKV_AVERAGE is the control that must differ."""

import sys

import numpy as np
import pytest

from support.checks import rank_files
from support.jobs import JOB_TIMEOUT
from support.paths import EXAMPLES, WORKERS
from support.warm_ranks import launch_in

sys.path.insert(0, str(EXAMPLES / "benchmarks"))
from ps_job import run_ps_job

# 5 SGD-momentum steps of weights below 1 in size: the two setups round a 2-term sum and
# the update apart, a few float32 units of roundoff (2^-24) per operation and step; 1e-5
# is ~10x the worst such sum, and the wrong convention moves weights by a factor ~2 of a
# step (checked > 100x it).
SAME_WITHIN = 1e-5


@pytest.mark.parametrize(
    "worker,matching,control",
    [("train_gluon.py", "0", "1"), ("train_module.py", "1", "0")],
    ids=["gluon-trainer-sums", "module-averages"],
)
def test_the_hooks_follow_dist_syncs_convention_for_trainer_and_module(
    warm_ranks, job_dir, worker, matching, control
):
    run_ps_job(
        [
            sys.executable,
            str(WORKERS / worker),
            "--out",
            str(job_dir / "dist_sync"),
            "--kvstore",
            "dist_sync",
        ],
        num_workers=2,
        num_servers=1,
        timeout=JOB_TIMEOUT,
    )
    reference = rank_files(job_dir / "dist_sync", range(2))[0]
    found = {}
    for average in (matching, control):
        job = launch_in(
            warm_ranks, 2, worker, "--out", str(job_dir / average), env={"MXKV_AVERAGE": average}
        )
        assert job.returncode == 0, job.output
        found[average] = rank_files(job_dir / average, range(2))[0]
    for name, weight in reference.items():
        assert np.allclose(found[matching][name], weight, rtol=0, atol=SAME_WITHIN), name
    assert (
        max(np.abs(found[control][n] - w).max() for n, w in reference.items()) > 100 * SAME_WITHIN
    )

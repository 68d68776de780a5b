"""Shard parallelism (mxkv_hybrid.shard) on real 2-rank jobs: K models trained together end
where each model trained alone ends, in every schedule, without any rank holding more than
its budget; ranks that describe different models are stopped."""

import json

import numpy as np
import pytest

from support.checks import load_ranks
from support.jobs import launch
from support.references import run_reference

RANKS, MODELS, EPOCHS, BATCHES = 2, 4, 2, 4  # (the worker's defaults)


def train(job_dir, budget_mb: float, *options: str) -> list:
    job = launch(
        RANKS,
        "shard_models.py",
        str(job_dir),
        "--models",
        str(MODELS),
        "--budget-mb",
        str(budget_mb),
        *options,
        timeout=150,
    )
    assert job.returncode == 0, job.output
    run_reference("shard_models.py", str(job_dir), "--models", str(MODELS), "--reference")
    reference = dict(np.load(job_dir / "reference.npz"))
    for rank, weights in enumerate(load_ranks(job_dir, RANKS)):
        assert weights.keys() == reference.keys()
        for name, value in weights.items():
            np.testing.assert_allclose(
                value,
                reference[name],
                rtol=1e-6,
                atol=1e-6,
                err_msg=f"rank {rank}: {name} differs from the model trained alone",
            )
    return [json.loads((job_dir / f"rank{r}.json").read_text()) for r in range(RANKS)]


def test_models_trained_together_end_where_each_alone_ends_within_the_budget(job_dir):
    """4 MLPs (SGD with momentum and Adam, different learning rates) on 2 ranks, a budget
    that cuts each into at least 3 shards: every weight matches the model trained alone,
    no rank ever held more than the budget, both ranks ran tasks."""
    reports = train(job_dir, 0.2)
    for report in reports:
        assert min(report["shards"].values()) >= 3, report["shards"]
        for device in report["devices"]:
            assert 0 < device["peak_bytes"] <= device["budget_bytes"] == int(0.2 * 2**20)
            assert device["tasks"] > 0
    tasks = sum(EPOCHS * BATCHES * (2 * shards - 1) for shards in reports[0]["shards"].values())
    assert sum(d["tasks"] for d in reports[0]["devices"]) == tasks


@pytest.mark.parametrize(
    "budget_mb, options",
    [
        (0.15, ("--schedule", "fifo", "--no-prefetch")),  # (shards may take the whole budget)
        (0.3, ("--schedule", "model-parallel")),
    ],
)
def test_the_other_schedules_train_the_same_models(job_dir, budget_mb, options):
    reports = train(job_dir, budget_mb, *options)
    assert min(reports[0]["shards"].values()) >= 2
    assert all(d["peak_bytes"] <= d["budget_bytes"] for d in reports[0]["devices"])


def test_ranks_that_describe_different_models_are_stopped_with_the_difference(job_dir):
    job = launch(RANKS, "shard_models.py", str(job_dir), "--mismatch", timeout=60)
    assert job.returncode != 0
    assert "rank 1 describes its models differently from rank 0 (model 2 differs" in job.output
    assert "every rank must build the same ModelTasks" in job.output

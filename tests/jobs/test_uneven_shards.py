"""Uneven shards: ranks with different numbers of batches end every epoch together
(Module.fit wrapped by the plugin, Gluon through even_batches), with the weights of
synchronous SGD over the batches that all ranks had; in mode async each group on its own."""

from typing import List, Optional, Sequence

import numpy as np
import pytest

from support.warm_ranks import launch_in
from workers.common import BATCH, REGRESSION_HALVES, REGRESSION_WEIGHT, regression_batches

RANKS = 3
EPOCHS = 3
LR = 0.1


def reference(
    counts: List[int],
    ranks: Optional[Sequence[int]] = None,
    features: Optional[Sequence[int]] = None,
) -> dict:
    """Numpy SGD: each epoch, min(counts) steps on the mean gradient of every rank's batch
    (`ranks` names the rank of each count, by default 0, 1, ...; `features`: the only
    ones the batches carry)."""
    weight = np.zeros((1, 3), np.float64)
    bias = np.zeros(1, np.float64)
    ranks = range(len(counts)) if ranks is None else ranks
    shards = [regression_batches(rank, count, features) for rank, count in zip(ranks, counts)]
    for _ in range(EPOCHS):
        for step in range(min(counts)):
            x = np.concatenate([shard[step][0] for shard in shards]).astype(np.float64)
            y = np.concatenate([shard[step][1] for shard in shards]).astype(np.float64)
            error = x @ weight.T + bias - y  # d(0.5 (pred - y)^2) / d pred
            weight -= LR * (error.T @ x) / len(x)
            bias -= LR * error.sum(axis=0) / len(x)
    return {"weight": weight, "bias": bias}


@pytest.mark.parametrize(
    "counts, mode, group_jobs",
    [([3, 5, 5], "allreduce", False), ([5, 5, 3], "sync", False), ([5, 3, 5], "sync", True)],
    ids=["first-rank-short", "last-rank-short-sync", "middle-group-short-sync-group-jobs"],
)
def test_ranks_stop_together_with_reference_weights(warm_ranks, job_dir, counts, mode, group_jobs):
    """In mode sync (3 groups, 1 server) each process also trains two models, Module's and
    Gluon's, through the one parameter-server connection it has; as separate group jobs
    the groups agree on every epoch's end through the servers."""
    assert BATCH * min(counts) > 0
    servers = ("--servers", "1", "--group-size", "1") if mode == "sync" else ()
    servers += ("--group-jobs",) if group_jobs else ()
    job = launch_in(
        warm_ranks,
        RANKS,
        "uneven_shards.py",
        "--out",
        str(job_dir),
        "--batches",
        ",".join(map(str, counts)),
        "--epochs",
        str(EPOCHS),
        "--lr",
        str(LR),
        env={"MXKV_MODE": mode},
        launcher_options=servers,
    )
    assert job.returncode == 0, job.output
    expected_steps = str([min(counts)] * EPOCHS)
    for rank in range(RANKS):
        lines = job.lines_of(rank)
        assert f"module steps per epoch: {expected_steps}" in lines, job.output
        assert f"gluon steps per epoch: {expected_steps}" in lines, job.output
        warned = any("with batches left" in line for line in lines)
        assert warned == (counts[rank] > min(counts)), job.output
    expected = reference(counts)
    for api in ("module", "gluon"):
        weights = [dict(np.load(job_dir / f"{api}-rank{r}.npz")) for r in range(RANKS)]
        for rank in range(RANKS):
            for name in expected:
                assert np.array_equal(weights[rank][name], weights[0][name]), (
                    f"{api} {name} rank {rank}"
                )
                np.testing.assert_allclose(
                    weights[rank][name].reshape(expected[name].shape),
                    expected[name],
                    rtol=1e-5,
                    atol=1e-6,
                    err_msg=f"{api} {name} differs from numpy SGD",
                )


def test_in_async_mode_each_group_ends_its_epochs_on_its_own(warm_ranks, job_dir):
    """Groups {0, 1} and {2, 3}; only rank 0 is short: its group takes 3 steps an epoch,
    the other group all 5 (the groups are not tied together in async). The groups have
    halves of the features (--halves), so only the servers' model, which both groups'
    updates move, holds every weight learned: the one every rank takes at the end."""
    counts = [3, 5, 5, 5]
    job = launch_in(
        warm_ranks,
        4,
        "uneven_shards.py",
        "--out",
        str(job_dir),
        "--apis",
        "module",
        "--halves",
        "--batches",
        ",".join(map(str, counts)),
        "--epochs",
        str(EPOCHS),
        env={"MXKV_MODE": "async"},
        launcher_options=("--servers", "1", "--group-size", "2"),
    )
    assert job.returncode == 0, job.output
    for rank, steps in enumerate([3, 3, 5, 5]):
        assert f"module steps per epoch: {[steps] * EPOCHS}" in job.lines_of(rank), job.output
    weights = [dict(np.load(job_dir / f"module-rank{r}.npz")) for r in range(4)]
    for first, second in ((0, 1), (2, 3)):  # a group's ranks hold its leader's weights
        for name in weights[first]:
            assert np.array_equal(weights[first][name], weights[second][name]), name
    servers = [dict(np.load(job_dir / f"module-consensus-rank{r}.npz")) for r in range(4)]
    for rank in (1, 2, 3):
        for name in servers[0]:
            assert np.array_equal(servers[rank][name], servers[0][name]), (rank, name)
    learned = servers[0]["weight"].ravel()
    true_weight = REGRESSION_WEIGHT.ravel()
    for group, features in zip(((0, 1), (2, 3)), REGRESSION_HALVES):
        # A half's weights move only by its group's updates: from 0 towards the truth.
        error = np.linalg.norm(learned[features] - true_weight[features])
        assert error < np.linalg.norm(true_weight[features]), (features, learned)
        # The control: the group's own steps alone (numpy SGD) leave the other half's
        # weights exactly at 0, which fails the same bound with equality.
        alone = reference([counts[rank] for rank in group], ranks=group, features=features)[
            "weight"
        ].ravel()
        other = [f for f in range(len(true_weight)) if f not in features]
        assert np.all(alone[other] == 0), alone

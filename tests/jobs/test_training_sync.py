"""MXKV_MODE=sync: 4 ranks in 2 groups, joined by real ps-lite scheduler and server
processes on 127.0.0.1. The weights must be identical on every rank and equal to the
single-process reference, as in mode allreduce (each rank initialises differently)."""

import numpy as np
import pytest

from support.checks import assert_identical_across_ranks, assert_matches_reference, load_ranks
from support.jobs import launch

SYNC = {"MXKV_MODE": "sync"}


def _check(job_dir, references, script, num_ranks, job, *reference_args):
    assert job.returncode == 0, job.output
    weights = load_ranks(job_dir / "dist", num_ranks)
    assert_identical_across_ranks(weights)
    reference = references.weights(script, "--reference", str(num_ranks), *reference_args)
    assert_matches_reference(weights[0], reference)


@pytest.mark.parametrize("servers", [1, 2])
def test_gluon_sync_two_groups(job_dir, references, servers):
    job = launch(
        4,
        "train_gluon.py",
        "--out",
        str(job_dir / "dist"),
        env=SYNC,
        launcher_options=["--group-size", "2", "--servers", str(servers)],
    )
    _check(job_dir, references, "train_gluon.py", 4, job)


def test_the_servers_optimizer_follows_the_trainers_settings(job_dir, references):
    """The optimizer runs on the servers (update_on_kvstore, the default): a learning rate
    set by the Trainer mid-training, and a changed batch size (rescale_grad), reach them."""
    options = ["--change-settings"]
    job = launch(
        4,
        "train_gluon.py",
        "--out",
        str(job_dir / "dist"),
        *options,
        env=SYNC,
        launcher_options=["--group-size", "2", "--servers", "2"],
    )
    assert "update_on_kvstore=True" in job.output
    _check(job_dir, references, "train_gluon.py", 4, job, *options)


def test_without_the_settings_the_servers_optimizer_would_differ(job_dir, references):
    """The check above can fail: the same run without the changes ends elsewhere."""
    changed = launch(
        2,
        "train_gluon.py",
        "--out",
        str(job_dir / "dist"),
        "--change-settings",
        env=SYNC,
        launcher_options=["--group-size", "1", "--servers", "1"],
    )
    assert changed.returncode == 0, changed.output
    mine = load_ranks(job_dir / "dist", 2)[0]
    reference = references.weights("train_gluon.py", "--reference", "2")
    assert any(not np.allclose(mine[n], reference[n], rtol=1e-4, atol=1e-6) for n in mine)


def test_the_store_api_in_sync_with_the_servers_states_saved_and_loaded(job_dir):
    """The KVStore API (its values averaged, an optimizer on the servers from the first
    set_optimizer on); the servers save their optimizer states and load them back (the
    momentum restored: store_api.py's roundtrip check), each its share beside the path."""
    job = launch(
        2,
        "store_api.py",
        str(job_dir),
        env=SYNC,
        launcher_options=["--group-size", "1", "--servers", "2"],
    )
    assert job.returncode == 0, job.output
    checks = [line for line in job.output.splitlines() if "CHECK" in line]
    assert len(checks) == 2 * 10 and all(line.endswith(" ok") for line in checks), job.output
    assert sorted(p.name for p in job_dir.glob("states*")) == [
        "states",
        "states.server0",
        "states.server1",
    ]
    assert "each server wrote its share" in (job_dir / "states").read_text()


@pytest.mark.parametrize("init", ["zero", "xavier"])
def test_first_sync_step_is_not_stale(job_dir, references, init):
    """MXNet's dist_sync was seen to return a stale first step (zero weights); check step 1."""
    options = ["--steps", "1", "--init", init, "--update-on-kvstore", "0"]
    job = launch(
        4,
        "train_gluon.py",
        "--out",
        str(job_dir / "dist"),
        *options,
        env=SYNC,
        launcher_options=["--group-size", "2", "--servers", "2"],
    )
    _check(job_dir, references, "train_gluon.py", 4, job, *options[:4])


def test_module_sync_groups_of_one(job_dir, references):
    job = launch(
        2,
        "train_module.py",
        "--out",
        str(job_dir / "dist"),
        env=SYNC,
        launcher_options=["--group-size", "1", "--servers", "1"],
    )
    _check(job_dir, references, "train_module.py", 2, job)

"""MXNet's Trainer rules that a dist store imposes, kept by the hybrid store: parameters
loaded once the store holds the weights (update_on_kvstore) are refused, as dist_sync
refuses them (RuntimeError), instead of being overwritten from the servers (in allreduce,
where every rank holds the weights, the store starts again: tests/test_job_restarts.py
resumes that way); and
update_on_kvstore=False in a mode whose updates run on the servers (async) is a ValueError
at the Trainer's first step, as under dist_async (tests/test_training_async.py)."""

import pytest

from conftest import launch

LOADED = ("--steps", "3", "--load-after-step", "1")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parameters_loaded_after_the_store_holds_the_weights_are_refused(job_dir, mode):
    job = launch(
        2,
        "train_gluon.py",
        "--out",
        str(job_dir),
        *LOADED,
        env={"MXKV_MODE": mode},
        launcher_options=["--group-size", "1", "--servers", "1"],
        timeout=120,
    )
    assert job.returncode != 0, job.output
    assert "RuntimeError: Cannot reset distributed KVStore: the parameter servers hold" in (
        job.output
    ), job.output


def test_parameters_loaded_where_the_workers_hold_the_weights_go_on(job_dir):
    """The control: the same load with update_on_kvstore=False (sync), where the Trainer
    resets nothing, trains on."""
    job = launch(
        2,
        "train_gluon.py",
        "--out",
        str(job_dir),
        *LOADED,
        "--update-on-kvstore",
        "0",
        env={"MXKV_MODE": "sync"},
        launcher_options=["--group-size", "1", "--servers", "1"],
        timeout=120,
    )
    assert job.returncode == 0, job.output
    assert "update_on_kvstore=False" in job.output, job.output

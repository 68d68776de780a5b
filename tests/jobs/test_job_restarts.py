"""mxkv-launch --restarts in the synchronous modes: a failed job is started again (with
fresh parameter servers) and a script that calls mxkv_hybrid.checkpoint.load_latest goes
on from its last checkpoint, on the same trajectory as a run that never failed."""

import numpy as np
import pytest

from support.checks import load_ranks
from support.jobs import launch
from support.references import run_reference

STEPS, EVERY = 40, 8


def resume_job(directory, env=None, options=(), ranks=2):
    return launch(
        ranks,
        "resume_steps.py",
        str(directory / "out"),
        str(directory / "checkpoints"),
        str(STEPS),
        str(EVERY),
        env=env,
        launcher_options=list(options),
        timeout=120,
    )


@pytest.mark.parametrize(
    "mode, options",
    [
        ("allreduce", []),
        ("sync", ["--group-size", "1", "--servers", "1"]),
        ("lasgd", []),
    ],
)
def test_a_restarted_job_resumes_from_its_last_checkpoint(tmp_path, mode, options):
    """Rank 1 is killed at its 20th step; the job is started again, loads the checkpoint of
    step 16 and ends where a job that never failed ends (1e-6; bitwise in these runs).
    sync: with the optimizer on the workers (the servers' state cannot be saved)."""
    knobs = {"MXKV_MODE": mode, **({"MXNET_UPDATE_ON_KVSTORE": "0"} if mode == "sync" else {})}
    failed = resume_job(
        tmp_path / "restarted",
        {**knobs, "MXKV_FAULT": "kill:rank=1:step=20"},
        [*options, "--restarts", "1"],
    )
    assert failed.returncode == 0, failed.output
    assert "starting the job again (restart 1 of 1, MXKV_ATTEMPT=1)" in failed.output
    for rank in range(2):
        assert f"rank {rank} attempt 0 starts at step 0" in failed.lines_of(rank)
        assert f"rank {rank} attempt 1 starts at step 16" in failed.lines_of(rank), failed.output
    clean = resume_job(tmp_path / "clean", knobs, options)
    assert clean.returncode == 0, clean.output
    for mine, reference in zip(
        load_ranks(tmp_path / "restarted" / "out", 2), load_ranks(tmp_path / "clean" / "out", 2)
    ):
        for name in reference:
            np.testing.assert_allclose(mine[name], reference[name], rtol=0, atol=1e-6, err_msg=name)


def test_a_job_that_keeps_failing_ends_after_its_restarts(tmp_path):
    job = launch(
        2, "-m", "mxkv_hybrid.no_such_module", launcher_options=["--restarts", "2"], timeout=60
    )
    assert job.returncode != 0
    assert "restart 1 of 2" in job.output and "restart 2 of 2" in job.output
    assert job.output.count("No module named mxkv_hybrid.no_such_module") >= 3, job.output


def test_one_process_resumes_on_the_same_trajectory(tmp_path):
    """The store updates the weights itself here: loading the checkpoint must keep the
    optimizer's loaded momentum (MXNet resets the Trainer's store when weights are loaded)."""
    run_reference("resume_steps.py", str(tmp_path / "a"), str(tmp_path / "ca"), "16", str(EVERY))
    output = run_reference(
        "resume_steps.py", str(tmp_path / "a"), str(tmp_path / "ca"), str(STEPS), str(EVERY)
    )
    assert "starts at step 16" in output
    run_reference(
        "resume_steps.py", str(tmp_path / "b"), str(tmp_path / "cb"), str(STEPS), str(EVERY)
    )
    resumed, straight = (dict(np.load(tmp_path / d / "rank0.npz")) for d in ("a", "b"))
    for name in straight:
        assert np.array_equal(resumed[name], straight[name]), name

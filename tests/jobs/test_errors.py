"""Bad input ends a real MPI job of 2-4 ranks with a clear message on every rank, not a hang
or a wrong result: ranks that disagree, bad knobs, a rank that fails or ends before its
store, a hung job, and a SIGTERM to the launcher."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from mxkv_hybrid.launch import shm_leftovers

from support.jobs import JOB_TAG, launch, processes_of
from support.paths import WORKERS
from tables.bad_knobs import BAD_KNOBS


@pytest.mark.parametrize(
    "case, rank0_says, rank1_says",
    [
        ("shape", "key 'weight' float32 (3, 4)", "key 'weight' float32 (4, 3)"),
        ("dtype", "key 'weight' float32 (3, 4)", "key 'weight' float64 (3, 4)"),
        ("key", "key 'weight' float32", "key 'other' float32"),
    ],
)
def test_ranks_that_disagree_get_a_mismatch_error(case, rank0_says, rank1_says):
    job = launch(3, "mismatch.py", case, timeout=90)
    assert job.returncode != 0
    assert "no error was raised" not in job.output
    for rank in range(3):
        text = "\n".join(job.lines_of(rank))
        assert "MismatchError: pushpull: ranks disagree" in text, job.output
        assert f"rank 0 has {rank0_says}" in text and f"rank 1 has {rank1_says}" in text, text


# the refusal above, on every rank of a job: a bad value, and a knob that does not exist
@pytest.mark.parametrize("env, message", [BAD_KNOBS[0], BAD_KNOBS[3]])
def test_bad_knobs_fail_on_every_rank(env, message):
    job = launch(2, "mismatch.py", "none", env=env, timeout=90)
    assert job.returncode != 0
    for rank in range(2):
        assert any("ConfigError" in line and message in line for line in job.lines_of(rank)), (
            job.output
        )


@pytest.mark.parametrize(
    "env",
    [{"MXKV_OVERLAP": "1"}, {"MXKV_MODE": "lasgd"}],
    ids=["overlap", "lasgd-overlapped-average"],
)
def test_overlap_without_mpi_thread_multiple_names_the_knob(env):
    job = launch(
        2,
        "train_steps.py",
        "--steps",
        "2",
        timeout=60,
        env=dict(env, MPI4PY_RC_THREAD_LEVEL="serialized"),
    )
    assert job.returncode != 0
    assert "took 2 steps" not in job.output
    for rank in range(2):
        assert any(
            "ConfigError" in line
            and "need MPI initialised with MPI_THREAD_MULTIPLE" in line
            and "set that knob to 0" in line
            for line in job.lines_of(rank)
        ), job.output


@pytest.mark.parametrize("mode", ["async", "easgd"])
def test_a_second_model_in_one_process_is_refused_in_server_modes(job_dir, mode):
    """Module's model, then Gluon's, in one process: the servers (one connection a process,
    one optimizer, weights by index) would mix them up."""
    job = launch(
        2,
        "uneven_shards.py",
        "--out",
        str(job_dir),
        "--batches",
        "2,2",
        "--epochs",
        "1",
        "--apis",
        "module,gluon",
        env={"MXKV_MODE": mode},
        launcher_options=("--servers", "1", "--group-size", "1"),
        timeout=60,
    )
    assert job.returncode != 0
    assert (job_dir / "module-rank0.npz").exists(), job.output  # the first model trained
    assert not (job_dir / "gluon-rank0.npz").exists(), job.output
    for rank in range(2):
        assert any(
            "ServerKeyConflict" in line and "another hybrid store of this process" in line
            for line in job.lines_of(rank)
        ), job.output
    assert "The value size cannot be changed" not in job.output


def segments_left_behind(before: set, settle_seconds: float = 10.0) -> set:
    """MPICH segments that appeared since `before` and that nothing uses, once the jobs
    of the suite's other workers have had `settle_seconds` to end or clean up theirs (a
    job still running maps its own; a leftover of a finished job stays for good)."""
    deadline = time.monotonic() + settle_seconds
    while True:
        left = shm_leftovers.segments() - before - shm_leftovers.in_use()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.mark.own_processes  # (which rank ended first)
def test_a_failing_rank_ends_the_job():
    """Rank 1 raises: the job ends, rank 1 is named, and MPICH's shared memory goes with
    the job (mpiexec kills the other ranks, which left a segment in /dev/shm: one per
    failed job before the launcher removed them; a job that ends normally leaves none)."""
    segments_before = shm_leftovers.segments()
    job = launch(3, "fail.py", "raise", timeout=90)
    assert not segments_left_behind(segments_before)
    assert job.returncode != 0
    assert "RuntimeError: rank 1 fails on purpose" in "\n".join(job.lines_of(1))
    assert "the job failed" in job.output, job.output
    # rank 1 alone, or (when the launcher woke only after mpiexec had ended the others,
    # as on a loaded machine) among the ranks it saw end together
    assert re.search(
        r"rank 1 \(pid \d+ on \S+\) was the first rank to end|ranks [^;]*\b1 "
        r"\(pid \d+ on \S+\)[^;]* were the first ranks to end, together",
        job.output,
    ), job.output


def test_a_rank_that_fails_before_its_store_ends_the_job_at_once():
    """Rank 1's script exits 1 before mx.kv.create while rank 0 waits in its own: the
    launcher, told the status by mxkv_hybrid.run, ends the job EXIT_GRACE_SECONDS (2 s)
    later, naming rank 1. Control (the launcher before this): rank 0 waited at full CPU
    until --timeout ended the job with 124."""
    job = launch(2, "fail.py", "early", "1", timeout=60)
    assert job.returncode == 1, job.output
    assert "rank 1 cannot read its data" in "\n".join(job.lines_of(1)), job.output
    assert re.search(
        r"mxkv-launch: rank 1's script exited with status 1 \d+ s ago, and the "
        r"other ranks went on",
        job.output,
    ), job.output
    assert "timed out" not in job.output


def test_a_rank_that_fails_before_its_store_ends_its_group_job_and_the_others():
    """Group jobs (easgd, 2 groups of 2): rank 3 exits 1 before its store; its group's job
    is ended, and, the groups not having met at the servers, the other group is stopped."""
    job = launch(
        4,
        "fail.py",
        "early",
        "3",
        timeout=60,
        env={"MXKV_MODE": "easgd", "MXKV_PS_TIMEOUT": "50"},
        launcher_options=["--group-size", "2", "--servers", "1"],
    )
    assert job.returncode == 1, job.output
    assert re.search(
        r"group 1 \(ranks 2-3\) failed: rank 3's script exited with status 1 \d+ s ago, and "
        r"the other ranks went on: .*, and the launcher ends its MPI job",
        job.output,
    ), job.output
    assert (
        "whose start waits for all, so the other groups cannot go on: stopping them" in job.output
    )
    assert "timed out" not in job.output and "MXKV_PS_TIMEOUT" not in job.output


def test_a_rank_that_ends_well_before_its_store_ends_the_job_naming_it():
    """Rank 1's script exits 0 before mx.kv.create: MPI's start on rank 0 waits for it for
    ever, before any stall monitor runs; the launcher, told that rank 1 ended before it
    started MPI and that rank 0 waits there, ends the job EXIT_GRACE_SECONDS later. Control
    (the launcher before this): the job waited until --timeout (exit 124)."""
    job = launch(2, "fail.py", "done", "1", timeout=60)
    assert job.returncode == 1, job.output
    assert re.search(
        r"mxkv-launch: rank 1's script exited with status 0 before it started MPI "
        r"\(created its store\), and rank 0 has waited for it in MPI's start",
        job.output,
    ), job.output
    assert "timed out" not in job.output


def test_a_hung_job_is_stopped_by_the_launcher_timeout():
    job = launch(2, "fail.py", "hang", timeout=6, env={"MXKV_STALL_TIMEOUT": "0"})  # no report
    assert job.returncode == 124
    assert "timed out after 6 s" in job.output


def test_sigterm_to_the_launcher_stops_every_rank(tmp_path):
    """A batch system's SIGTERM reaches only the launcher: it must end the ranks too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MXKV_")}
    env[JOB_TAG] = tag = "sigterm-" + tmp_path.name
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            "2",
            "--",
            "python",
            str(WORKERS / "fail.py"),
            "hang",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while len(processes_of(tag)) < 4 and time.monotonic() < deadline:  # launcher, mpiexec, ranks
        time.sleep(0.2)
    assert len(processes_of(tag)) >= 4, "the job's processes were not found"
    time.sleep(2)  # the ranks are importing mxnet / waiting in the collective
    launcher.send_signal(signal.SIGTERM)
    output, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 130, output
    assert "stopping all ranks" in output
    assert processes_of(tag) == []

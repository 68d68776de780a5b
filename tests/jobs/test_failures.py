"""Failures end the whole job quickly, with a message that names the rank, and leave no
process behind: a rank killed or raising mid-training (MXKV_FAULT), a hung rank, a bucket
stuck behind MXNet's engine and a rank whose script ended early (the stall report of
MXKV_STALL_TIMEOUT); NaN gradients are
caught before they reach the weights (MXKV_CHECK_FINITE)."""

import re

import pytest

from support.jobs import launch

LAUNCH_TIMEOUT = 90  # the launcher's --timeout: a job stopped by it (124) hung
STALL = {"MXKV_STALL_TIMEOUT": "3"}


def assert_stopped_by_the_failure(job) -> None:
    assert job.returncode not in (0, 124), job.output


@pytest.mark.own_processes  # (which rank ended first)
@pytest.mark.parametrize("action", ["kill", "raise"])
def test_a_rank_that_dies_ends_the_job_and_is_named(action):
    job = launch(
        2, "train_steps.py", env={"MXKV_FAULT": f"{action}:rank=1:step=3"}, timeout=LAUNCH_TIMEOUT
    )
    assert_stopped_by_the_failure(job)
    assert "mxkv_hybrid: MXKV_FAULT: rank 1 will " + action in job.output
    assert re.search(r"rank 1 \(pid \d+ on \S+\) was the first rank to end", job.output), job.output
    if action == "kill":  # the line docs/troubleshooting.md quotes, word for word
        assert re.search(
            r"mxkv-launch: the job failed with exit status \d+; rank 1 \(pid \d+ "
            r"on \S+\) was the first rank to end \(the PID in mpiexec's report, if "
            r"it printed one, can be a rank it stopped itself\)",
            job.output,
        ), job.output
    assert "took 10 steps" not in job.output  # nobody finished the training


@pytest.mark.own_processes  # (which rank ended first)
def test_a_killed_rank_ends_the_parameter_servers_too():
    job = launch(
        2,
        "train_steps.py",
        env={"MXKV_MODE": "sync", "MXKV_FAULT": "kill:rank=1:step=3"},
        timeout=LAUNCH_TIMEOUT,
        launcher_options=("--servers", "1", "--group-size", "1"),
    )
    assert_stopped_by_the_failure(job)
    # What this test is for is the servers' end; the naming is test_a_rank_that_dies_...'s.
    # With a server and a scheduler on 2 cores the launcher may not run between rank 1's
    # end and mpiexec's stop of rank 0 (seen once in CI) and then names both, honestly.
    assert re.search(
        r"rank 1 \(pid \d+ on \S+\) was the first rank to end|ranks (\d+ "
        r"\(pid \d+ on \S+\), )*1 \(pid \d+ on \S+\).* were the first ranks to "
        r"end, together",
        job.output,
    ), job.output
    # launch() has checked that no process of the job (servers, scheduler) is left


def stall_report(job, culprit: int, ranks: int) -> str:
    """The report of the first rank that ended the job on a stall (not the culprit)."""
    assert_stopped_by_the_failure(job)
    reporters = [
        r
        for r in range(ranks)
        if r != culprit
        and any(
            "for the other ranks (MXKV_STALL_TIMEOUT=3); ending the job" in line
            for line in job.lines_of(r)
        )
    ]
    assert reporters, job.output
    lines = job.lines_of(reporters[0])
    start = next(i for i, line in enumerate(lines) if "MXKV_STALL_TIMEOUT=3); ending" in line)
    return "\n".join(lines[start : start + 4])


def test_a_hung_rank_is_reported_by_a_waiting_rank():
    job = launch(
        3,
        "train_steps.py",
        env={**STALL, "MXKV_FAULT": "hang:rank=1:step=3"},
        timeout=LAUNCH_TIMEOUT,
    )
    report = stall_report(job, culprit=1, ranks=3)
    assert re.search(
        r"rank 1 on \S+: working \(not in a collective\) for \d+ s after wait #\d+ "
        r"\(it has not reached the stalled wait\): hung, or busy alone",
        report,
    ), report
    for rank in (0, 2):
        assert re.search(
            rf"rank {rank} on \S+: waiting in #\d+ \(pushpull of 2 key\(s\)\)", report
        ), report


def test_a_rank_stuck_with_the_gil_held_is_reported_as_not_answering():
    """Rank 1 sleeps in C with Python's lock held: its monitor thread cannot answer the
    waiting ranks, and the report says so (docs/troubleshooting.md, the stall report's "no
    answer")."""
    job = launch(2, "train_steps.py", "--hold-gil", "1:3", env=STALL, timeout=LAUNCH_TIMEOUT)
    report = stall_report(job, culprit=1, ranks=2)
    assert re.search(
        r"rank 1: no answer within \d+ s \(dead, exiting, or stuck with Python's "
        r"GIL held\)",
        report,
    ), report
    assert re.search(r"rank 0 on \S+: waiting in #\d+", report), report


def test_a_bucket_stuck_behind_the_engine_is_reported():
    """MXKV_OVERLAP=1: rank 1's backward never ends, so its bucket never becomes ready; rank
    0's communication thread waits in that bucket's allreduce, its own thread in MXNet's
    engine (not a watched wait): the monitor watches the bucket."""
    job = launch(
        2,
        "train_steps.py",
        "--hang-in-backward",
        "1:3",
        env={**STALL, "MXKV_OVERLAP": "1"},
        timeout=LAUNCH_TIMEOUT,
    )
    report = stall_report(job, culprit=1, ranks=2)
    assert re.search(
        r"rank 0 on \S+ waited \d+ s in #\d+ \(a bucket reduced behind MXNet's "
        r"engine \(MXKV_OVERLAP\)\)",
        report,
    ), report
    assert re.search(r"rank 1 on \S+: working \(not in a collective\) for \d+ s", report), report


@pytest.mark.parametrize("how", ["fewer steps", "MXKV_FAULT exit"])
def test_a_rank_whose_script_ended_early_is_reported(how):
    if how == "fewer steps":
        job = launch(2, "train_steps.py", "--short", "1:4", env=STALL, timeout=LAUNCH_TIMEOUT)
        assert "rank 1 took 4 steps" in job.output
    else:
        job = launch(
            2,
            "train_steps.py",
            env={**STALL, "MXKV_FAULT": "exit:rank=1:step=5"},
            timeout=LAUNCH_TIMEOUT,
        )
    report = stall_report(job, culprit=1, ranks=2)
    assert re.search(r"rank 1 on \S+: its script ended after \d+ waits", report), report


def test_nan_gradients_are_named_and_never_applied():
    job = launch(
        2,
        "train_steps.py",
        "--nan-at",
        "1:3",
        env={"MXKV_CHECK_FINITE": "1"},
        timeout=LAUNCH_TIMEOUT,
    )
    assert job.returncode == 0, job.output  # every rank caught the same error
    final = set()
    for rank in range(2):
        text = "\n".join(job.lines_of(rank))
        error = re.search(
            r"step 3: pushpull: NaN or Inf .*\(the first key with one per rank: "
            r"([^)]*)\)",
            text,
        )
        assert error and error.group(1) == "rank 1: key 1", text  # Trainer order: last first
        kept = re.search(r"weight before (\[.*\]) after (\[.*\])", text)
        assert kept and kept.group(1) == kept.group(2) and "nan" not in kept.group(1), text
        final.add(kept.group(2))
    assert len(final) == 1, job.output  # and the same on every rank


def test_without_the_check_nan_reaches_every_rank():
    """The control: with MXKV_CHECK_FINITE unset one rank's NaN data spoils every model."""
    job = launch(2, "train_steps.py", "--nan-at", "1:3", timeout=LAUNCH_TIMEOUT)
    assert job.returncode == 0, job.output
    for rank in range(2):
        assert re.search(rf"rank {rank} took 10 steps; weight \[nan, nan, nan\]", job.output), (
            job.output
        )

"""The parameter server missing, never started, or killed mid-training: the ranks stop
with a clear error within a bounded time, and the launcher leaves no process behind."""

import os
import re
import signal
import time

import pytest

from support.jobs import environment_of, finish_job, launch, processes_of, start_job

SYNC = {"MXKV_MODE": "sync"}


def test_sync_without_servers_says_how_to_start_them(job_dir):
    job = launch(2, "ps_steps.py", str(job_dir / "progress"), "3", env=SYNC, timeout=90)
    assert job.returncode != 0
    for rank in range(2):
        text = "\n".join(job.lines_of(rank))
        assert (
            "ConfigError: MXKV_MODE=sync joins the groups through MXNet's parameter server" in text
            and "mxkv-launch -n N --servers S" in text
        ), job.output


def test_a_scheduler_that_never_started_ends_the_job_after_the_timeout(job_dir):
    env = dict(
        SYNC,
        MXKV_PS_TIMEOUT="7",
        MXKV_GROUP_SIZE="1",
        DMLC_PS_ROOT_URI="127.0.0.1",
        DMLC_PS_ROOT_PORT="9",
        DMLC_NUM_SERVER="1",
        DMLC_NUM_WORKER="2",
        DMLC_NODE_HOST="127.0.0.1",
        DMLC_ROLE="worker",
    )
    started = time.monotonic()
    job = launch(2, "ps_steps.py", str(job_dir / "progress"), "3", env=env, timeout=90)
    assert job.returncode != 0
    assert (
        "could not reach the parameter-server scheduler at 127.0.0.1:9 within 7 s "
        "(MXKV_PS_TIMEOUT): Connection refused" in job.output
    ), job.output
    assert "--ps-host must be an address of that machine this host reaches" in job.output
    assert re.search(
        r"waiting for the parameter-server scheduler at 127\.0\.0\.1:9 "
        r"\(Connection refused\) for [56] s of 7",
        job.output,
    ), job.output
    assert time.monotonic() - started < 80  # ended by the wait's timeout, not the job's


def test_a_stall_report_names_a_leader_waiting_for_the_scheduler(job_dir):
    """Rank 1 waits in a collective for its leader, which waits for a scheduler that does
    not answer: the report says so, not "hung, or busy alone"."""
    env = dict(
        SYNC,
        MXKV_PS_TIMEOUT="60",
        MXKV_STALL_TIMEOUT="3",
        MXKV_GROUP_SIZE="2",
        DMLC_PS_ROOT_URI="127.0.0.1",
        DMLC_PS_ROOT_PORT="9",
        DMLC_NUM_SERVER="1",
        DMLC_NUM_WORKER="1",
        DMLC_ROLE="worker",
    )
    job = launch(2, "ps_steps.py", str(job_dir / "progress"), "3", env=env, timeout=90)
    assert job.returncode != 0
    assert re.search(
        r"rank 0 on \S+: waiting for the parameter-server scheduler at "
        r"127\.0\.0\.1:9 for \d+ s",
        job.output,
    ), job.output
    assert "busy alone" not in job.output


@pytest.mark.parametrize("victim", ["server", "scheduler"])
def test_a_parameter_server_node_killed_mid_training_ends_the_job(job_dir, victim):
    progress = job_dir / "progress"
    running = start_job(
        4,
        "ps_steps.py",
        str(progress),
        "100000",
        env=SYNC,
        timeout=120,
        launcher_options=["--group-size", "2", "--servers", "2"],
    )
    deadline = time.monotonic() + 90
    while not (progress.exists() and progress.read_text() and int(progress.read_text()) >= 5):
        assert time.monotonic() < deadline and running.process.poll() is None, "no progress"
        time.sleep(0.2)
    nodes = [
        pid for pid in processes_of(running.tag) if environment_of(pid).get("DMLC_ROLE") == victim
    ]
    assert nodes, f"no {victim} process found"
    os.kill(nodes[0], signal.SIGKILL)
    job = finish_job(running)
    assert job.returncode != 0
    assert "finished" not in job.output
    name = "parameter server" if victim == "server" else "parameter-server scheduler"
    assert (
        f"the {name}" in job.output
        and "exited with status -9 while the ranks were running" in job.output
    ), job.output

"""The parameter server missing, never started, or killed mid-training: the ranks stop
with a clear error within a bounded time, and the launcher leaves no process behind."""
import os
import signal
import time

import pytest

from conftest import environment_of, finish_job, launch, processes_of, start_job

SYNC = {"MXKV_MODE": "sync"}


def test_sync_without_servers_says_how_to_start_them(job_dir):
    job = launch(2, "ps_steps.py", str(job_dir / "progress"), "3", env=SYNC, timeout=90)
    assert job.returncode != 0
    for rank in range(2):
        text = "\n".join(job.lines_of(rank))
        assert "ConfigError: MXKV_MODE=sync joins the groups through MXNet's parameter server" \
            in text and "mxkv-launch -n N --servers S" in text, job.output


def test_a_scheduler_that_never_started_ends_the_job_after_the_timeout(job_dir):
    env = dict(SYNC, MXKV_PS_TIMEOUT="5", MXKV_GROUP_SIZE="1", DMLC_PS_ROOT_URI="127.0.0.1",
               DMLC_PS_ROOT_PORT="9", DMLC_NUM_SERVER="1", DMLC_NUM_WORKER="2",
               DMLC_NODE_HOST="127.0.0.1", DMLC_ROLE="worker")
    started = time.monotonic()
    job = launch(2, "ps_steps.py", str(job_dir / "progress"), "3", env=env, timeout=90)
    assert job.returncode != 0
    assert "connecting to the parameter server (scheduler 127.0.0.1:9, 1 server(s)) did not " \
           "finish within 5 s (MXKV_PS_TIMEOUT)" in job.output, job.output
    assert time.monotonic() - started < 80  # ended by the watchdog, not by the job timeout


@pytest.mark.parametrize("victim", ["server", "scheduler"])
def test_a_parameter_server_node_killed_mid_training_ends_the_job(job_dir, victim):
    progress = job_dir / "progress"
    running = start_job(4, "ps_steps.py", str(progress), "100000", env=SYNC, timeout=120,
                        launcher_options=["--group-size", "2", "--servers", "2"])
    deadline = time.monotonic() + 90
    while not (progress.exists() and progress.read_text() and int(progress.read_text()) >= 5):
        assert time.monotonic() < deadline and running.process.poll() is None, "no progress"
        time.sleep(0.2)
    nodes = [pid for pid in processes_of(running.tag)
             if environment_of(pid).get("DMLC_ROLE") == victim]
    assert nodes, f"no {victim} process found"
    os.kill(nodes[0], signal.SIGKILL)
    job = finish_job(running)
    assert job.returncode != 0
    assert "finished" not in job.output
    name = "parameter server" if victim == "server" else "parameter-server scheduler"
    assert f"the {name}" in job.output and "exited with status -9 while the ranks were running" \
        in job.output, job.output

"""training_step.py counts the CPU of a job's parameter servers (cpu_seconds_of_servers):
the processes with DMLC_ROLE=server and the job's tag, and no others. Three processes burn
the same CPU: a server of this job, a server of another job and a worker of this job; only
the first counts."""

import os
import subprocess
import sys

from support.paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES / "benchmarks"))
import training_step

BURN_SECONDS = 0.5
# burns BURN_SECONDS of CPU, says so, then waits (still in /proc) until its stdin closes
BURN = (
    "import sys, time\n"
    f"end = time.process_time() + {BURN_SECONDS}\n"
    "while time.process_time() < end: pass\n"
    "print('burnt', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_the_servers_of_this_job_and_no_others_are_counted(monkeypatch):
    monkeypatch.setenv(training_step.RUN_TAG, "this-job")
    assert training_step.cpu_seconds_of_servers() is None  # none running yet
    burners = [
        subprocess.Popen(
            [sys.executable, "-c", BURN],
            env=dict(os.environ, DMLC_ROLE=role, **{training_step.RUN_TAG: tag}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for role, tag in (("server", "this-job"), ("server", "another-job"), ("worker", "this-job"))
    ]
    try:
        for burner in burners:
            assert burner.stdout.readline() == "burnt\n"
        counted = training_step.cpu_seconds_of_servers()
    finally:
        for burner in burners:
            burner.kill()
            burner.communicate(timeout=30)
    # one burner's CPU: its BURN_SECONDS and its start (well under 0.3 s here); two or
    # three burners' would be twice or three times BURN_SECONDS
    assert counted is not None and BURN_SECONDS <= counted < BURN_SECONDS + 0.3, counted

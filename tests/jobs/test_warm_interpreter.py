"""The warm interpreter (tests/support/zygote.py) gives the suite's processes what a
process of their own has: its exit status or deadly signal, its end when its stand-in
is killed (the stand-in carries the job's command line and environment in /proc), and
the real interpreter
whenever a setting read at start differs from the warm process's."""

import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from support.jobs import JOB_TAG, processes_of
from support.paths import WORKERS
from support.warm_interpreter import WarmInterpreter

PROBE = str(WORKERS / "interpreter_probe.py")


@pytest.fixture
def warm(warm_interpreter) -> WarmInterpreter:
    if warm_interpreter is None:
        pytest.skip("the suite runs without a warm interpreter (PYTEST_MXKV_COLD=1)")
    return warm_interpreter


def start(warm: WarmInterpreter, *args: str, **env: str) -> subprocess.Popen:
    """The probe through the stand-in, in the warm process's environment plus `env`."""
    full = {**warm.env, **env}
    return subprocess.Popen(
        [str(warm.stand_in), "-m", "mxkv_hybrid.run", PROBE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full,
    )


def probe_line(process: subprocess.Popen) -> re.Match:
    line = process.stdout.readline()
    found = re.match(r"PROBE pid=(\d+) executable=(\S+)", line)
    assert found, line
    return found


@pytest.mark.parametrize(
    "action, returncode", [("exit", 3), ("exit", 0), ("signal", 15), ("signal", 9)]
)
def test_a_forked_process_ends_as_a_process_of_its_own(warm, action, returncode):
    process = start(warm, action, str(returncode))
    found = probe_line(process)
    assert found[2] == str(warm.stand_in)  # forked: what it starts goes through the stand-in too
    assert int(found[1]) != process.pid
    expected = -returncode if action == "signal" else returncode
    assert process.wait(timeout=60) == expected


def test_the_stand_in_is_found_as_a_job_process_and_killing_it_kills_the_process(warm):
    tag = uuid.uuid4().hex
    process = start(warm, "sleep", **{JOB_TAG: tag})
    child = int(probe_line(process)[1])
    assert processes_of(tag) == [process.pid]  # the stand-in: what a test finds and kills
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(f"/proc/{child}/stat") if os.path.exists(f"/proc/{child}") else open(os.devnull) as f:
        assert f.read().split(") ")[-1][:1] in ("", "Z")  # gone (or a zombie being reaped)


def test_a_setting_read_at_start_that_differs_runs_the_real_interpreter(warm):
    process = start(warm, "exit", "0", OMP_NUM_THREADS="7")
    found = probe_line(process)
    assert found[2] == sys.executable and int(found[1]) == process.pid
    assert process.wait(timeout=60) == 0

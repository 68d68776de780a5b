"""Real MPI jobs started through mxkv-launch, with a hard timeout and nothing left behind:
each process of a job carries a tag that finds it after the job ends."""

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import pytest

from mxkv_hybrid.launch.processes import live_processes

from support.paths import WORKERS

JOB_TIMEOUT = 180  # seconds; a hard bound on every multi-process test

# Every process the suite starts loads the standard library's distutils rather than
# setuptools' copy, which MXNet's import (distutils.version) otherwise pulls in with
# setuptools and pkg_resources: tests/jobs/test_easgd.py ran on 16 % less CPU (farm-bench,
# 2 runs each way). Python 3.12 has no distutils of its own, so there it is left alone.
if sys.version_info < (3, 12):
    os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")

# the interpreter mxkv-launch runs under (and so its ranks and servers): the warm
# interpreter's stand-in while the session has one (support/warm_interpreter.py)
INTERPRETER = sys.executable
JOB_TAG = "PYTEST_MXKV_JOB"  # marks every process of one test job (not an MXKV_* knob)


@dataclass
class Job:
    returncode: int
    output: str

    def lines_of(self, rank: int) -> List[str]:
        prefix = f"[{rank}] "
        return [line[len(prefix) :] for line in self.output.splitlines() if line.startswith(prefix)]


def processes_of(tag: str) -> List[int]:
    """Live processes whose environment carries JOB_TAG=tag: mpiexec, its proxies, the
    ranks and the parameter servers all inherit it, whatever session they run in."""
    marker = f"{JOB_TAG}={tag}".encode()
    found = []
    for pid in live_processes():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


def wait_for_line(
    lines: Callable[[], List[str]],
    pattern: str,
    seconds: float,
    ended: Callable[[], bool] = lambda: False,
) -> re.Match:
    """The first of `lines()` matching `pattern`, waited for up to `seconds` (less once
    `ended()`: no line will come)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for line in list(lines()):
            found = re.search(pattern, line)
            if found:
                return found
        if ended():
            break
        time.sleep(0.1)
    raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(lines()))


class OutputLines:
    """The lines a started process (stdout piped, text) writes, collected by a thread as
    they come, for tests that act while it runs."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: List[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, seconds: float = 60) -> re.Match:
        """The first line matching `pattern`, waited for up to `seconds` (less if the
        process ended and all its output was read)."""
        return wait_for_line(
            lambda: self.lines,
            pattern,
            seconds,
            ended=lambda: self.process.poll() is not None and not self._reader.is_alive(),
        )

    def join_reader(self) -> None:
        self._reader.join(timeout=10)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


@dataclass
class RunningJob:
    process: subprocess.Popen
    tag: str
    timeout: float


def start_job(
    num_ranks: int,
    script: Optional[str],
    *args: str,
    env: Optional[Dict[str, str]] = None,
    timeout: float = JOB_TIMEOUT,
    launcher_options: Sequence[str] = (),
) -> RunningJob:
    """Starts `mxkv-launch -n N [options] -- python workers/script args` (script "-m":
    `python -m args`; None: no program, for --check), every process of it marked with a
    fresh JOB_TAG."""
    if script is None:
        program = []
    else:
        target = ["-m"] if script == "-m" else [str(WORKERS / script)]
        program = ["--", "python", *target, *args]
    command = [
        INTERPRETER,
        "-m",
        "mxkv_hybrid.launch",
        "-n",
        str(num_ranks),
        "--timeout",
        str(timeout),
        *launcher_options,
        *program,
    ]
    tag = uuid.uuid4().hex
    full_env = job_environment()
    full_env.update(env or {})
    full_env[JOB_TAG] = tag
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env
    )
    return RunningJob(process, tag, timeout)


def finish_job(job: RunningJob) -> Job:
    """Waits for the launcher (hard timeout) and checks that nothing of the job is left."""
    try:
        output, _ = job.process.communicate(timeout=job.timeout + 30)
    finally:
        if job.process.poll() is None:
            job.process.kill()
            job.process.wait()
        leftovers = processes_of(job.tag)
        for pid in leftovers:
            os.kill(pid, 9)
    assert not leftovers, f"processes left behind: {leftovers}"
    return Job(job.process.returncode, output)


# what a test's job must not inherit: other jobs' knobs, and a batch scheduler's hosts
# (mxkv-launch takes SLURM_* / PBS_NODEFILE as its host list when it gets no -H)
JOB_VARIABLES = ("MXKV_", "DMLC_", "PS_", "SLURM_", "PBS_")


def job_environment() -> Dict[str, str]:
    """This process's environment without JOB_VARIABLES."""
    return {k: v for k, v in os.environ.items() if not k.startswith(JOB_VARIABLES)}


def launch(num_ranks: int, script: Optional[str], *args: str, **options) -> Job:
    """Runs a job to the end: start_job + finish_job."""
    return finish_job(start_job(num_ranks, script, *args, **options))


def environment_of(pid: int) -> Dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    return tmp_path

"""The session's warm interpreter (support/zygote.py): each pytest process starts one, and
start_job runs mxkv-launch through its stand-in, so that the launcher, its ranks and its
parameter servers are forked from a process that has imported MXNet once, rather than
each importing it again (a 2-rank sync digits job: 2.9 CPU-seconds instead of 5.0).

A test marked `own_processes` gets processes started afresh: what it checks is how the
deaths of real processes are seen (which rank ended first), and a stand-in ends a moment
before its child. `PYTEST_MXKV_COLD=1` in pytest's environment turns the warm interpreter
off for the whole run."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional

import pytest

from mxkv_hybrid.launch import threads

from support import jobs
from support.paths import TESTS

SUPPORT = TESTS / "support"
COLD = "PYTEST_MXKV_COLD"


class WarmInterpreter:
    """The warm process, and the stand-in interpreter that reaches it."""

    def __init__(self, folder: Path):
        self.socket = str(folder / "warm.sock")
        self.stand_in = folder / "python"
        self.stand_in.write_text(
            f"#!{sys.executable} -S\n"
            "# the stand-in interpreter of tests/support/zygote.py\n"
            "import sys\n"
            f"sys.path.insert(0, {str(SUPPORT)!r})\n"
            "import zygote\n"
            f"zygote.stand_in({self.socket!r}, {sys.executable!r})\n"
        )
        self.stand_in.chmod(0o755)
        # what mxkv-launch gives each rank of a 2-rank job on this host
        self.env = jobs.job_environment()
        self.env.setdefault(threads.VARIABLE, str(threads.threads_for(2)))
        self.process = subprocess.Popen(
            [sys.executable, str(SUPPORT / "zygote.py"), self.socket],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        ready = self.process.stdout.readline()
        if ready.strip() != "ready":
            self.close()
            raise RuntimeError(f"the warm interpreter did not start: {ready!r}")

    def close(self) -> None:
        self.process.stdin.close()  # it kills what it still runs, and ends
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def warm_interpreter(tmp_path_factory) -> Iterator[Optional[WarmInterpreter]]:
    if os.environ.get(COLD) == "1":
        yield None
        return
    warm = WarmInterpreter(tmp_path_factory.mktemp("interpreter"))
    jobs.INTERPRETER = str(warm.stand_in)
    try:
        yield warm
    finally:
        jobs.INTERPRETER = sys.executable
        warm.close()


@pytest.fixture(autouse=True)
def interpreter_of_jobs(request) -> Iterator[None]:
    """The warm interpreter, started at the session's first test outside the unit tier
    (which starts no process); the real one for the jobs of a test marked `own_processes`."""
    if request.node.get_closest_marker("unit") is not None:
        yield
        return
    request.getfixturevalue("warm_interpreter")
    if request.node.get_closest_marker("own_processes") is None:
        yield
        return
    warm, jobs.INTERPRETER = jobs.INTERPRETER, sys.executable
    try:
        yield
    finally:
        jobs.INTERPRETER = warm

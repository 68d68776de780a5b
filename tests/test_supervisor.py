"""The one supervision loop of every launch path (launch/supervisor.py), with a scripted
Work and real helper processes: the work's own exit status, a dead helper named even when
the work fails at the same time, the deadline."""

import subprocess
import sys
import time
from typing import List, Optional

import pytest

from mxkv_hybrid.launch import supervisor
from mxkv_hybrid.launch.processes import Node
from mxkv_hybrid.launch.supervisor import supervise


@pytest.fixture(autouse=True)
def keep_pytests_signal_handlers(monkeypatch):
    """The launcher turns SIGTERM into an exception; pytest's process keeps its own."""
    monkeypatch.setattr(supervisor, "stop_on_signals", lambda: None)


class Scripted:
    """A Work whose poll gives `codes` in turn (then the last one forever)."""

    running, stopping = "tests", "stopping the test"

    def __init__(self, codes: List[Optional[int]]):
        self.codes, self.polls, self.waited = codes, 0, 0.0

    def poll(self) -> Optional[int]:
        self.polls += 1
        return self.codes[min(self.polls, len(self.codes)) - 1]

    def wait(self, seconds: float) -> None:
        self.waited += seconds
        time.sleep(seconds)


def helper(status: int) -> Node:
    """A helper process that has exited with `status`."""
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({status})"])
    process.wait()
    return Node("parameter server 0", process)


def test_the_work_ends_the_supervision_with_its_status():
    work = Scripted([None, None, 7])
    assert supervise(work, [helper(0)], None, None) == 7
    assert work.polls == 3 and work.waited > 0


def test_a_dead_helper_is_named_even_when_the_work_fails_at_once(capsys):
    dead = helper(3)
    assert supervise(Scripted([5]), [dead], None, None) == 5
    assert supervise(Scripted([None]), [dead], None, None) == 1
    assert (
        f"the parameter server 0 (pid {dead.process.pid}) exited with status 3 while the "
        "tests were running; stopping the test"
    ) in capsys.readouterr().err


def test_the_deadline_ends_work_that_goes_on(capsys):
    started = time.monotonic()
    assert supervise(Scripted([None]), [], started + 0.5, 0.5) == 124
    assert time.monotonic() - started < 5
    assert "timed out after 0.5 s; stopping the test" in capsys.readouterr().err

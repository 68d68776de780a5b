"""The one supervision loop of every launch path (launch/supervisor.py), with a scripted
Work and real helper processes: the work's own exit status, a dead helper named even when
the work fails at the same time."""

import subprocess
import sys

from mxkv_hybrid.launch.processes import Node
from mxkv_hybrid.launch.supervisor import supervise

from support.scripted_work import Scripted


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

"""The one supervision loop of every launch path (launch/supervisor.py), with a scripted
Work: the deadline ends work that goes on, with status 124."""

import time

from mxkv_hybrid.launch.supervisor import supervise

from support.scripted_work import Scripted


def test_the_deadline_ends_work_that_goes_on(capsys):
    started = time.monotonic()
    assert supervise(Scripted([None]), [], started + 0.5, 0.5) == 124
    assert time.monotonic() - started < 5
    assert "timed out after 0.5 s; stopping the test" in capsys.readouterr().err

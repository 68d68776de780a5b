"""The one loop that watches every launch path: what runs (one MPI job, one MPI job per
group, the groups joined to a served job) is a Work, watched together with the parameter
server's processes, the --timeout deadline and the signals that stop the launcher.

    code = supervise(work, helpers, deadline, timeout)

Each tick: a dead vital helper is named (control/verdict.judge_helpers; even when the
work failed at the same time) and ends the supervision (one that is not vital does what
its after_exit says); otherwise the work's own poll (its lost hosts, failed ranks, orders)
may end it with an exit status;
otherwise the deadline; then the work waits for news.
The caller ends what is left. Exit statuses: the work's, 1 for a dead helper, 124
timeout, 130 stopped by a signal."""

import logging
import threading
import time
from typing import List, Optional, Protocol

from .control.verdict import HelperState, judge_helpers
from .processes import Node, Terminated, stop_on_signals

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2  # the longest a tick waits for news
OUTPUT_LOCK = threading.Lock()  # a launcher line is never printed inside a relayed one


def say(line: str) -> None:
    """One launcher line on stderr: a warning (a failure, or what was done about one)."""
    with OUTPUT_LOCK:
        log.warning(f"mxkv-launch: {line}")


class Work(Protocol):
    """What a launcher watches."""

    running: str  # what runs, for 'while the ranks were running'
    stopping: str  # what ending it does, for '...; stopping all ranks'

    def poll(self) -> Optional[int]:
        """The exit status once the work is over or must end (having said why), or None."""

    def wait(self, seconds: float) -> None:
        """Returns when news may have come, after `seconds` at the most."""


def supervise(
    work: Work, helpers: List[Node], deadline: Optional[float], timeout: Optional[float]
) -> int:
    """Watches `work` and `helpers` (the list may be replaced in place while it runs)
    until the work is over, a helper dies, `deadline` (a time.monotonic(), from the
    --timeout of `timeout` seconds) passes or a signal comes. Returns the exit status."""
    stop_on_signals()
    try:
        while True:
            states = [
                HelperState(h.name, h.process.pid, h.process.poll(), h.vital) for h in helpers
            ]
            helpers_verdict = judge_helpers(states, work.running)
            for helper in helpers:
                if not helper.vital and helper.process.poll() is not None:
                    helper.after_exit()
            code = work.poll()
            if not helpers_verdict.alive:
                say(f"{helpers_verdict.sentence}; {work.stopping}")
                return code or helpers_verdict.status
            if code is not None:
                return code
            if deadline is not None and time.monotonic() > deadline:
                say(f"timed out after {timeout:g} s; {work.stopping}")
                return 124
            work.wait(POLL_SECONDS)
    except (KeyboardInterrupt, Terminated) as stop:
        say(f"{stop.__class__.__name__} {stop}; {work.stopping}")
        return 130

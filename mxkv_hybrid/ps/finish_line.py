"""Where separate group jobs (modes async and easgd) meet at the end of training.

Each group's leader tells the servers, through one tally key (FINISH_KEY: a done flag and
a step count per group, which the servers add up), how many optimizer steps its group took
(with every push) and, at the end, that it is done. A restarted group reads its count back
to train only the steps it had left. A leader that is done waits for the other
groups, but not for a lost one: when its launcher gave up every unfinished group (lost,
no restart left), or no unfinished group has made progress for MXKV_PS_TIMEOUT seconds (a
group of another launcher, or none), it goes on without them and says which groups it left
behind and why.
"""

import logging
import time
from typing import List, Optional, Sequence

import mxnet as mx
import numpy as np

from ..config import read_knob
from ..launch.control.keeper import groups_given_up
from ..logs import TO_STDERR
from .client import ParameterServer
from .keys import ServerKeys
from .optimizers import FINISH_KEY

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2
ASK_SECONDS = 1.0  # how often a waiting leader asks its launcher which groups it gave up
_shared: Optional["FinishLine"] = None  # this process's, once a store created it


def finish_line_for(
    ps: Optional[ParameterServer],
    separate_jobs: bool,
    group: int,
    groups: int,
    timeout: float,
    attempt: int,
) -> Optional["FinishLine"]:
    """A group leader's finish line when the groups are separate MPI jobs, else None (
    `attempt`: the restart it rejoins the servers in, 0 on a start of its own): one
    per process, as the ps-lite connection is, so every store of the process (a script's
    own and the one Module.fit creates, say) reports to the same tally."""
    global _shared
    if ps is None or not separate_jobs:
        return None
    if _shared is None:
        _shared = FinishLine(ps, group, groups, timeout, attempt)
    return _shared


class FinishLine:
    """One group leader's view of the tally (created by every leader at the same point:
    its init is a barrier among the leaders)."""

    def __init__(self, ps: ParameterServer, group: int, groups: int, timeout: float, attempt: int):
        ServerKeys().claim(FINISH_KEY, "the group jobs' finish line")
        self._ps = ps
        self._group = group
        self._groups = groups
        self._timeout = timeout
        self._attempt = attempt
        ps.init([FINISH_KEY], [mx.nd.zeros((2 * groups,))])
        self._progress = np.zeros(2 * groups, np.float32)
        self._progress[groups + group] = 1

    def progress(self, steps: int = 1) -> mx.nd.NDArray:
        """What to push under FINISH_KEY with each of this group's pushes: the optimizer
        steps it took since its last push (a fresh array: a dist kvstore reuses a pushed
        array as the receive buffer of later pulls)."""
        return mx.nd.array(self._progress * steps)

    def rejoined(self, what: str, values: Sequence[mx.nd.NDArray]) -> int:
        """The optimizer steps the servers recorded for this group before this start (0 on
        a first start). On a restarted group's leader also one line saying what the group
        starts from: the model after how many steps of the groups, at which step of its
        own, and its checksum (the sum of `values`)."""
        if not self._attempt:
            return 0
        tally = mx.nd.zeros((2 * self._groups,))
        self._ps.push_pull([FINISH_KEY], [], [tally])
        steps = tally.asnumpy()[self._groups :]
        done = int(steps[self._group])
        checksum = sum(float(v.asnumpy().astype(np.float64).sum()) for v in values)
        log.info(
            f"mxkv_hybrid: group {self._group} rejoins (restart {self._attempt}): its "
            f"ranks start from {what} after {int(steps.sum())} steps of the groups, at step "
            f"{done} of its own (checksum {checksum:.17g})",
            extra=TO_STDERR,
        )
        return done

    def cross(self) -> List[int]:
        """Reports this group done and waits for the others; returns the groups left
        behind (not done: given up by the launcher, or no progress for `timeout` seconds)."""
        done = np.zeros(2 * self._groups, np.float32)
        done[self._group] = 1
        self._ps.push_pull([FINISH_KEY], [mx.nd.array(done)], [])
        tally = mx.nd.zeros((2 * self._groups,))
        seen, changed, asked = None, time.monotonic(), 0.0
        launcher = read_knob("MXKV_LAUNCHER_LINK")
        while True:
            self._ps.push_pull([FINISH_KEY], [], [tally])
            now = tally.asnumpy()
            finished, progress = now[: self._groups] >= 1, now[self._groups :]
            left = [g for g in range(self._groups) if not finished[g]]
            if not left:
                return []
            if seen is None or not np.array_equal(progress, seen):
                seen, changed = progress, time.monotonic()
            given_up = None
            if launcher and time.monotonic() - asked > ASK_SECONDS:
                asked, given_up = time.monotonic(), groups_given_up(launcher)
            why = reason_to_go_on(left, given_up, time.monotonic() - changed, self._timeout)
            if why:
                log.warning(
                    f"mxkv_hybrid: group {self._group}: group(s) {left} {why}: going "
                    "on without them"
                )
                return left
            time.sleep(POLL_SECONDS)


def reason_to_go_on(
    left: List[int], given_up: Optional[List[int]], quiet: float, timeout: float
) -> Optional[str]:
    """Why a leader at the finish line goes on without the unfinished groups `left`, or
    None to wait on: its launcher gave them all up (`given_up`; None: not asked this time),
    or none of them made progress for more than `timeout` seconds (`quiet`)."""
    if given_up is not None and set(left) <= set(given_up):
        return "were given up by the launcher (lost, no restart left)"
    if quiet > timeout:
        return f"neither finished nor made progress for {timeout:g} s (MXKV_PS_TIMEOUT)"
    return None

"""Where separate group jobs (mxkv-launch --group-jobs) meet at the end of training.

Each group's leader tells the servers, through one tally key (FINISH_KEY: a done flag and
a progress count per group, which the servers add up), that its group made progress (with
every push) and, at the end, that it is done. A leader that is done waits for the other
groups, but not for a lost one: when no unfinished group has made progress for
MXKV_PS_TIMEOUT seconds, it goes on without them and says which groups it left behind.
"""
import sys
import time
from typing import List, Optional, Sequence

import mxnet as mx
import numpy as np

from .client import ParameterServer
from .keys import ServerKeys
from .optimizers import FINISH_KEY

POLL_SECONDS = 0.2


def finish_line_for(ps: Optional[ParameterServer], keys: ServerKeys, separate_jobs: bool,
                    group: int, groups: int, timeout: float, attempt: int
                    ) -> Optional["FinishLine"]:
    """A group leader's finish line when the groups are separate MPI jobs, else None."""
    if ps is None or not separate_jobs:
        return None
    return FinishLine(ps, keys, group, groups, timeout, attempt)


class FinishLine:
    """One group leader's view of the tally (created by every leader at the same point:
    its init is a barrier among the leaders)."""

    def __init__(self, ps: ParameterServer, keys: ServerKeys, group: int, groups: int,
                 timeout: float, attempt: int):
        keys.claim(FINISH_KEY, "the group jobs' finish line")
        self._ps = ps
        self._group = group
        self._groups = groups
        self._timeout = timeout
        self._attempt = attempt
        ps.init([FINISH_KEY], [mx.nd.zeros((2 * groups,))])
        self._progress = np.zeros(2 * groups, np.float32)
        self._progress[groups + group] = 1

    def progress(self) -> mx.nd.NDArray:
        """What to push under FINISH_KEY with each of this group's pushes (a fresh array:
        a dist kvstore reuses a pushed array as the receive buffer of later pulls)."""
        return mx.nd.array(self._progress)

    def rejoined(self, what: str, values: Sequence[mx.nd.NDArray]) -> None:
        """On a restarted group's leader: one line saying what the group starts from (the
        model after how many updates of the groups, and its checksum: the sum of `values`)."""
        if not self._attempt:
            return
        tally = mx.nd.zeros((2 * self._groups,))
        self._ps.push_pull([FINISH_KEY], [], [tally])
        updates = int(tally.asnumpy()[self._groups:].sum())
        checksum = sum(float(v.asnumpy().astype(np.float64).sum()) for v in values)
        print(f"mxkv_hybrid: group {self._group} rejoins (restart {self._attempt}): its ranks "
              f"start from {what} after {updates} updates of the groups (checksum "
              f"{checksum:.17g})", file=sys.stderr, flush=True)

    def cross(self) -> List[int]:
        """Reports this group done and waits for the others; returns the groups left
        behind (not done, no progress for `timeout` seconds)."""
        done = np.zeros(2 * self._groups, np.float32)
        done[self._group] = 1
        self._ps.push_pull([FINISH_KEY], [mx.nd.array(done)], [])
        tally = mx.nd.zeros((2 * self._groups,))
        seen, changed = None, time.monotonic()
        while True:
            self._ps.push_pull([FINISH_KEY], [], [tally])
            now = tally.asnumpy()
            finished, progress = now[:self._groups] >= 1, now[self._groups:]
            if finished.all():
                return []
            if seen is None or not np.array_equal(progress, seen):
                seen, changed = progress, time.monotonic()
            elif time.monotonic() - changed > self._timeout:
                left = [g for g in range(self._groups) if not finished[g]]
                print(f"mxkv_hybrid: group {self._group}: group(s) {left} neither finished nor "
                      f"made progress for {self._timeout:g} s (MXKV_PS_TIMEOUT): going on "
                      "without them", file=sys.stderr, flush=True)
                return left
            time.sleep(POLL_SECONDS)

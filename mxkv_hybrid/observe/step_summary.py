"""MXKV_SUMMARY_EVERY=k: every k steps, one line saying what the communication cost.

A step is one pushpull of the store (one Trainer.step or Module update). Each rank
measures the time it spent inside the store (pushpull, push, pull and the averaging
after an update: communicating, and waiting there for slower ranks) and, from the wall
time, the time outside it (computing), and counts the bytes it sent: what the collectives'
algorithms sent (as they travel: compressed float32 counts 2 bytes a value) to ranks of
its own group and of other groups, and what it pushed to and pulled from the parameter
servers (across groups). The first of the ranks that step together (rank 0; in modes
async and asynchronous easgd each group's leader) gathers the figures and prints them,
bytes summed over the ranks; in mode async with the staleness of the group's pushes in
the window (the updates of other groups each missed).
"""

import time
import weakref
from typing import Callable, Optional, Sequence

import numpy as np

from ..comm import remote_memory, stall
from ..comm.collectives import TensorCollectives, live_collectives
from ..comm.lockstep import in_lockstep, lockstep_comm
from ..comm.topology import groups, world
from ..config import Config
from ..ps.client import traffic

FIGURES = ("inside_s", "outside_s", "gaps", "bytes_inside", "bytes_across", "rank")


def _leader_traffic() -> int:
    """Bytes this process's group leader moved across groups outside the collectives: its
    parameter-server pushes and pulls, and its remote-memory reads and accumulates."""
    return sum(traffic()) + remote_memory.traffic()


def _size_text(nbytes: float) -> str:
    """'16 B', '1.5 KiB', '4 MiB', ... (3 significant digits above a KiB)."""
    if nbytes < 1024:
        return f"{nbytes:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        nbytes /= 1024
        if nbytes < 1000 or unit == "GiB":  # 1000-1023 would read 1e+03 at 3 digits
            break
    return f"{nbytes:.3g} {unit}"


class StepSummary:
    """Times this rank's store calls and prints a summary line every `every` steps."""

    def __init__(
        self, every: int, config: Config, staleness: Optional[Callable[[], Sequence[int]]] = None
    ):
        """Collective over all ranks (the store's constructor creates it on every rank).
        staleness: mode async, the staleness of each push of this rank's group so far."""
        self._every = every
        self._staleness = staleness
        self._staleness_seen = 0
        this_group = groups(config.group_size)
        self._label = (
            ""
            if in_lockstep(config) or this_group.num_groups == 1
            else f"group {this_group.group_index}, "
        )
        self._steps = 0
        self._inside_s = 0.0
        self._window_start: Optional[float] = None  # None until the first step
        self._byte_baseline: weakref.WeakKeyDictionary[TensorCollectives, tuple] = (
            weakref.WeakKeyDictionary()
        )
        self._leader_baseline = 0

    def timed(self, call: Callable[[], object]) -> None:
        """Runs call() as time inside the store."""
        entered = time.perf_counter()
        if self._window_start is None:
            self._start_window(entered)
        try:
            call()
        finally:
            self._inside_s += time.perf_counter() - entered

    def step_done(self) -> None:
        """Counts a step (its pushpull, and the averaging after it in modes easgd, lasgd);
        every `every` steps, the ranks in lockstep gather their figures and one prints them."""
        self._steps += 1
        if self._steps % self._every == 0:
            self._report()

    def _start_window(self, now: float) -> None:
        """A new window of steps starts now: time and bytes count from here."""
        self._window_start = now
        self._inside_s = 0.0
        for collectives in live_collectives():
            self._byte_baseline[collectives] = (
                collectives.bytes_sent_inside,
                collectives.bytes_sent_across,
            )
        self._leader_baseline = _leader_traffic()

    def _report(self) -> None:
        first_window = self._steps == self._every
        assert self._window_start is not None  # a window is reported after its steps
        wall = time.perf_counter() - self._window_start
        inside, across = self._bytes_moved()
        mine = np.array(
            [
                self._inside_s,
                wall - self._inside_s,
                self._every - 1 if first_window else self._every,
                inside,
                across,
                world().rank,
            ],
            np.float64,
        )
        comm = lockstep_comm()
        everyone: Optional[np.ndarray] = mine[None, :]
        if comm is not None:
            gathered = np.empty((comm.Get_size(), len(FIGURES)), np.float64)
            with stall.waiting("the step summary's gather"):
                comm.Gather(mine, gathered if comm.Get_rank() == 0 else None, root=0)
            everyone = gathered if comm.Get_rank() == 0 else None
        if everyone is not None:
            print(self._line(everyone), flush=True)
        self._start_window(time.perf_counter())

    def _bytes_moved(self) -> tuple:
        """(bytes sent inside this rank's group, bytes sent and pulled across groups) since
        the window started."""
        inside = across = 0
        for collectives in live_collectives():
            before_inside, before_across = self._byte_baseline.get(collectives, (0, 0))
            inside += collectives.bytes_sent_inside - before_inside
            across += collectives.bytes_sent_across - before_across
        return inside, across + _leader_traffic() - self._leader_baseline

    def _line(self, everyone: np.ndarray) -> str:
        """The printed summary of the ranks' figures (one row per rank, columns FIGURES)."""
        figures = dict(zip(FIGURES, everyone.T))
        steps, ranks, gaps = self._every, figures["rank"].astype(int), figures["gaps"][0]
        compute = figures["outside_s"] / max(gaps, 1) * 1e3
        times = f"communication {figures['inside_s'].mean() / steps * 1e3:.2f} ms"
        if gaps > 0:  # the first window of a summary every step has no time between steps
            times = f"compute {compute.mean():.2f} ms, " + times
        text = (
            f"mxkv_hybrid summary: {self._label}steps {self._steps - steps + 1}-{self._steps}, "
            f"{len(ranks)} rank(s), per step: {times} (means over ranks), "
            f"{_size_text(figures['bytes_inside'].sum() / steps)} sent inside groups and "
            f"{_size_text(figures['bytes_across'].sum() / steps)} across groups"
        )
        if gaps > 0 and len(ranks) > 1:
            slowest, fastest = int(np.argmax(compute)), int(np.argmin(compute))
            over = 100 * (compute[slowest] / compute.mean() - 1) if compute.mean() > 0 else 0.0
            text += (
                f"; slowest rank {ranks[slowest]} computes {compute[slowest]:.2f} ms "
                f"(+{over:.0f}% over the mean), fastest rank {ranks[fastest]} "
                f"{compute[fastest]:.2f} ms"
            )
        return text + self._staleness_text()

    def _staleness_text(self) -> str:
        """'; staleness of the pushes median m, max x (n pushes)' for the window's pushes."""
        pushes = list(self._staleness()) if self._staleness is not None else []
        window, self._staleness_seen = pushes[self._staleness_seen :], len(pushes)
        if not window:
            return ""
        return (
            f"; staleness of {len(window)} push(es) (updates of other groups each missed): "
            f"median {np.median(window):.0f}, mean {np.mean(window):.2f}, max {max(window)}"
        )


def summary_for(
    config: Config, staleness: Optional[Callable[[], Sequence[int]]] = None
) -> Optional[StepSummary]:
    """The step summary when MXKV_SUMMARY_EVERY is set, else None."""
    if config.summary_every <= 0:
        return None
    return StepSummary(config.summary_every, config, staleness)

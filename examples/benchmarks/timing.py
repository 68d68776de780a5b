"""The timing loops the benchmark workers share."""

import random
import time
from typing import Callable, Dict, Hashable, Iterable, List


def seconds(call: Callable[[], object]) -> float:
    """Wall-clock seconds of one call()."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def time_calls(reps: int, barrier: Callable[[], None], call: Callable[[], None]) -> List[float]:
    """Seconds of each of `reps` calls, started together on every rank (barrier) and ended
    when MXNet's engine has finished what the call queued."""
    import mxnet as mx

    def call_and_wait() -> None:
        call()
        mx.nd.waitall()

    times = []
    for _ in range(reps):
        barrier()
        times.append(seconds(call_and_wait))
    return times


def interleaved(
    runs: Iterable[Hashable],
    reps: int,
    once: Callable[[Hashable], float],
) -> Dict[Hashable, List[float]]:
    """once(run) for every run, a warm-up then `reps` rounds in an order shuffled alike on
    every rank (no run always follows another): {run: its times}."""
    runs = list(runs)
    for run in runs:
        once(run)  # warm-up: buffers, plan, page faults
    times: Dict[Hashable, List[float]] = {run: [] for run in runs}
    for rep in range(reps):
        order = list(runs)
        random.Random(rep).shuffle(order)
        for run in order:
            times[run].append(once(run))
    return times

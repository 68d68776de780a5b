"""The timing loops the benchmark workers share."""
import time
from typing import Callable, List


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

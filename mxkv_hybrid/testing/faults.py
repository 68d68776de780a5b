"""Faults injected into a job on an emulated cluster (testing/cluster.py): kill -9 of a
rank, SIGSTOP of a whole host for a while, a link cut (and healed later). The fault
matrix (tests/tables/fault_matrix.py) and the throughput-under-faults benchmark
(examples/benchmarks/faults_throughput.py) strike with them."""

import os
import signal
import threading
from typing import Callable, List, Optional

from .cluster import Cluster

RANK_MARKER = "mxkv_hybrid.run"  # in every rank's command line (mxkv-launch starts them so)


def pids(cluster: Cluster, host: str, marker: str = "") -> List[int]:
    """The processes on `host` whose command line holds `marker`, oldest first."""
    found = []
    for pid in sorted(cluster.processes(host)):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def send(targets: List[int], sig: signal.Signals) -> None:
    """`sig` to every process of `targets` still running."""
    for pid in targets:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def later(seconds: float, action: Callable[[], None]) -> None:
    """Runs `action` in `seconds` (a daemon timer: a failed run does not wait for it)."""
    timer = threading.Timer(seconds, action)
    timer.daemon = True
    timer.start()


def kill_a_rank(cluster: Cluster, host: str) -> None:
    """kill -9 of the last training rank on `host` (its group's second, with two)."""
    ranks = pids(cluster, host, RANK_MARKER)
    assert ranks, f"no rank runs on {host}"
    os.kill(ranks[-1], signal.SIGKILL)


def pause_host(cluster: Cluster, host: str, seconds: float) -> None:
    """SIGSTOP of every process on `host`, SIGCONT `seconds` later."""
    stopped = pids(cluster, host)
    send(stopped, signal.SIGSTOP)
    later(seconds, lambda: send(stopped, signal.SIGCONT))


def cut_link(cluster: Cluster, host: str, heal_after: Optional[float] = None) -> None:
    """Cuts `host`'s link; heals it `heal_after` seconds later (None: never)."""
    cluster.cut(host)
    if heal_after is not None:
        later(heal_after, lambda: cluster.heal(host))

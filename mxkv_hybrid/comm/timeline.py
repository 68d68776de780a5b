"""MXKV_TIMELINE=path.json: a Chrome-trace / Perfetto timeline of the communication.

Every rank records spans on CLOCK_MONOTONIC: each fused collective (pushpull, broadcast)
and, inside it, every bucket's pack, allreduce (with its algorithm and bytes) and unpack,
measured in C++; the parameter-server exchanges of the group leaders; the elastic
exchanges (easgd) and model averages (lasgd). At exit each rank writes path.json.rank<r>;
mxkv-launch merges them into path.json (one process row per rank) when the job ends.
Everything is kept in memory until then: record short runs or a few hundred steps.
"""

import atexit
import json
import os
import threading
import time
from contextlib import contextmanager, nullcontext
from functools import lru_cache
from typing import Any, ContextManager, Dict, List, Optional

from ..config import read_knob
from ..timeline_parts import part_path
from .topology import world


def _now_us() -> int:
    return time.monotonic_ns() // 1000


class Timeline:
    """The events of this process (a rank), written at exit."""

    def __init__(self, path: str, rank: int, host: str):
        self._path = path
        self._rank = rank
        self._lock = threading.Lock()
        self._events: List[Dict[str, Any]] = [
            {
                "name": "process_name",
                "ph": "M",
                "pid": rank,
                "args": {"name": f"rank {rank} ({host})"},
            }
        ]
        self._sources: List[Any] = []  # C++ collectives whose bucket events are drained
        atexit.register(self.write)

    def add_source(self, collectives: Any) -> None:
        collectives.enable_timeline(True)
        self._sources.append(collectives)

    def _add(
        self,
        name: str,
        category: str,
        start_us: int,
        duration_us: int,
        thread: int,
        args: Dict[str, Any],
    ) -> None:
        event = {
            "name": name,
            "cat": category,
            "ph": "X",
            "ts": start_us,
            "dur": duration_us,
            "pid": self._rank,
            "tid": thread,
            "args": args,
        }
        with self._lock:
            self._events.append(event)

    @contextmanager
    def span(self, name: str, category: str, **args: Any):
        start = _now_us()
        try:
            yield
        finally:
            self._add(name, category, start, _now_us() - start, threading.get_ident(), args)

    def drain(self) -> None:
        """Moves the C++ bucket events recorded so far into this timeline."""
        for source in self._sources:
            for name, algorithm, start, duration, nbytes, thread in source.drain_timeline():
                args = {"bytes": nbytes, **({"algorithm": algorithm} if algorithm else {})}
                self._add(name, "bucket", start, duration, thread, args)

    def write(self) -> None:
        self.drain()
        with self._lock:
            events = list(self._events)
        with open(part_path(self._path, self._rank), "w") as f:
            json.dump(events, f)


@lru_cache(maxsize=None)
def current() -> Optional[Timeline]:
    """This process's timeline when MXKV_TIMELINE is set, else None."""
    path = read_knob("MXKV_TIMELINE")
    if not path:
        return None
    return Timeline(os.path.abspath(path), world().rank, world().host)


def span(name: str, category: str, **args: Any) -> ContextManager:
    """A span on this process's timeline (nothing when MXKV_TIMELINE is unset)."""
    timeline = current()
    return nullcontext() if timeline is None else timeline.span(name, category, **args)

"""MXKV_TIMELINE=path.json: a Chrome-trace / Perfetto timeline of the communication.

Every rank records spans on CLOCK_MONOTONIC: each fused collective (pushpull, broadcast)
and, inside it, every bucket's pack, allreduce (with its algorithm and bytes) and unpack,
measured in C++; the parameter-server exchanges of the group leaders; the elastic
exchanges (easgd) and model averages (lasgd). At exit each rank writes path.json.rank<r>;
mxkv-launch merges them into path.json (one process row per rank) when the job ends.
Everything is kept in memory until then: record short runs or a few hundred steps.
"""

import atexit
import glob
import json
import os
import threading
import time
from contextlib import contextmanager, nullcontext
from functools import lru_cache
from typing import Any, ContextManager, Dict, List, Optional

from ..config import read_knob
from .topology import world

PART_SUFFIX = ".rank"


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
        with open(f"{self._path}{PART_SUFFIX}{self._rank}", "w") as f:
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


def merge(path: str) -> Optional[str]:
    """Joins the ranks' parts of `path` into one Chrome trace (the parts are removed);
    returns a line saying what was written, or None when there were no parts."""
    parts = sorted(glob.glob(f"{glob.escape(path)}{PART_SUFFIX}*"))
    if not parts:
        return None
    events: List[Dict[str, Any]] = []
    for part in parts:
        with open(part) as f:
            events += json.load(f)
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    for part in parts:
        os.remove(part)
    return (
        f"timeline of {len(parts)} rank(s), {len(events)} events, written to {path} "
        "(open it in ui.perfetto.dev or chrome://tracing)"
    )

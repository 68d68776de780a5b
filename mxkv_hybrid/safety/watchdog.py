"""Ends the job when a blocking operation outlives its deadline (ps-lite has no timeouts)."""

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Optional, Tuple

from ..comm import stall


class Watchdog:
    """`with watchdog.guard("what", seconds):` -- if the block has not finished after
    `seconds`, prints what was being waited for and calls `on_expiry` (topology.end_job)."""

    def __init__(self, on_expiry: Callable[[], None], who: str):
        self._on_expiry = on_expiry
        self.who = who
        self._lock = threading.Lock()
        self._pending: Optional[Tuple[str, float, float]] = None  # what, deadline, seconds
        threading.Thread(target=self._watch, name="mxkv-watchdog", daemon=True).start()

    @contextmanager
    def guard(self, what: str, seconds: float):
        with self._lock:
            self._pending = (what, time.monotonic() + seconds, seconds)
        try:
            with stall.outside(what):  # a stall report on another rank names this wait
                yield
        finally:
            with self._lock:
                self._pending = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            with self._lock:
                pending = self._pending
            if pending is not None and time.monotonic() > pending[1]:
                what, _, seconds = pending
                sys.stderr.write(
                    f"mxkv_hybrid: {self.who}: {what} did not finish within "
                    f"{seconds:g} s (MXKV_PS_TIMEOUT); ending the job\n"
                )
                sys.stderr.flush()
                self._on_expiry()
                return

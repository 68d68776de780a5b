"""Work done in a thread beside the computation (a shard's load, a task's store), whose
error reaches the main thread."""

import threading
import time
from typing import Callable, List, Optional


class Background:
    """`work` run in a thread (or at once, inline); wait() re-raises its error."""

    def __init__(self, work: Callable[[], None], background: bool):
        self._error: List[BaseException] = []
        self._thread: Optional[threading.Thread] = None
        self.inline_seconds = 0.0
        if not background:
            began = time.perf_counter()
            work()
            self.inline_seconds = time.perf_counter() - began
            return

        def run() -> None:
            try:
                work()
            except BaseException as error:  # noqa: BLE001  (re-raised in the main thread by wait())
                self._error.append(error)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def wait(self) -> float:
        """Seconds spent here waiting for it (or doing it, inline)."""
        began = time.perf_counter()
        if self._thread is not None:
            self._thread.join()
        if self._error:
            raise self._error[0]
        return time.perf_counter() - began + self.inline_seconds

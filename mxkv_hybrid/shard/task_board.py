"""Which task each model is at, shared by all ranks: in an MPI window on rank 0, one slot
per model holding 2 x (tasks done) + (1 if its next task is claimed), and the order in
which models' tasks became ready. A rank claims a model's next task by compare-and-swap,
so two ranks never run the same task and no rank serves the others."""

import threading
from typing import Tuple

import numpy as np

HOLDER = 0


class TaskBoard:
    """Created collectively over `comm` for `models` chains of tasks."""

    def __init__(self, comm, models: int):
        from mpi4py import MPI

        self._MPI = MPI
        self._models = models
        slots = 1 + 2 * models  # a ready counter, then (progress, ready order) per model
        size = slots * 8 if comm.Get_rank() == HOLDER else 0
        self._window = MPI.Win.Allocate(size, 8, comm=comm)
        if comm.Get_rank() == HOLDER:
            # mpi4py's buffer has the buffer protocol, which numpy's stubs do not see
            np.frombuffer(self._window.tomemory(), np.int64)[:] = 0  # type: ignore[call-overload]
        comm.Barrier()
        self._window.Lock_all()
        self._slots = slots
        self._lock = threading.Lock()  # (a rank's store thread marks tasks finished)

    def snapshot(self) -> Tuple[np.ndarray, np.ndarray]:
        """(progress, ready order) of every model, read atomically slot by slot."""
        MPI = self._MPI
        values = np.zeros(self._slots, np.int64)
        with self._lock:
            self._window.Get_accumulate(
                [np.zeros(self._slots, np.int64), MPI.INT64_T],
                [values, MPI.INT64_T],
                HOLDER,
                op=MPI.NO_OP,
            )
            self._window.Flush(HOLDER)
        return values[1::2], values[2::2]

    def claim(self, model: int, done: int) -> bool:
        """Takes the model's next task (number `done`) unless another rank took it first."""
        MPI = self._MPI
        found = np.zeros(1, np.int64)
        with self._lock:
            self._window.Compare_and_swap(
                [np.array([2 * done + 1], np.int64), MPI.INT64_T],
                [np.array([2 * done], np.int64), MPI.INT64_T],
                [found, MPI.INT64_T],
                HOLDER,
                1 + 2 * model,
            )
            self._window.Flush(HOLDER)
        return int(found[0]) == 2 * done

    def finish(self, model: int, done: int) -> None:
        """Task number `done` of the model is finished (its results stored): the next one
        is ready, after every task that became ready before it."""
        MPI = self._MPI
        order = np.zeros(1, np.int64)
        with self._lock:
            self._window.Fetch_and_op(
                [np.ones(1, np.int64), MPI.INT64_T], [order, MPI.INT64_T], HOLDER, 0, op=MPI.SUM
            )
            self._window.Flush(HOLDER)
            for slot, value in ((2 + 2 * model, order[0]), (1 + 2 * model, 2 * (done + 1))):
                self._window.Accumulate(
                    [np.array([value], np.int64), MPI.INT64_T], HOLDER, slot, op=MPI.REPLACE
                )
                self._window.Flush(HOLDER)

    def close(self) -> None:
        self._window.Unlock_all()
        self._window.Free()

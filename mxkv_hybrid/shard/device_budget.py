"""The bytes a rank holds on its device, against its budget: every shard loaded (the one
running and the one loading beside it) and the activations of their tasks, as
footprint.py measured them. Holding more than the budget is refused, never done. Only
the rank's main thread reserves and releases."""
from ..errors import MXKVError
from .footprint import describe


class DeviceBudget:
    def __init__(self, limit_bytes: int):
        self.limit = limit_bytes
        self.resident = 0
        self.peak = 0

    def fits(self, nbytes: int) -> bool:
        return self.resident + nbytes <= self.limit

    def reserve(self, nbytes: int, what: str) -> int:
        """Counts `nbytes` as resident until release(nbytes); refuses beyond the budget."""
        if not self.fits(nbytes):
            raise MXKVError(f"{what} needs {describe(nbytes)} but {describe(self.resident)} "
                            f"of the device budget of {describe(self.limit)} are held")
        self.resident += nbytes
        self.peak = max(self.peak, self.resident)
        return nbytes

    def release(self, nbytes: int) -> None:
        self.resident -= nbytes

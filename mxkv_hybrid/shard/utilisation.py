"""What each device did: time in tasks (computing, loading shards, storing them) against
time waiting for a ready task, the bytes it held at most against its budget, the tasks it
ran; and each model's loss per epoch. Printed as a table, kept as JSON."""

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Tuple

Span = Tuple[float, float, int, str]  # (start, end, model, kind) seconds from the start


@dataclass
class DeviceUse:
    rank: int
    budget_bytes: int
    peak_bytes: int = 0
    tasks: int = 0
    computing: float = 0.0  # seconds
    loading: float = 0.0  # waiting for a shard's arrays (not hidden by a prefetch)
    storing: float = 0.0
    bytes_loaded: int = 0
    bytes_stored: int = 0
    timeline: List[Span] = field(default_factory=list)

    @property
    def busy(self) -> float:
        return self.computing + self.loading + self.storing


@dataclass
class Report:
    seconds: float
    samples: int  # trained, over all models
    devices: List[DeviceUse]
    losses: Dict[str, List[float]]  # model -> mean loss per epoch
    shards: Dict[str, int]  # model -> shard count
    schedule: str

    @property
    def throughput(self) -> float:
        """Samples a second over all models."""
        return self.samples / self.seconds

    def utilisation(self, device: DeviceUse) -> float:
        return device.computing / self.seconds

    def table(self) -> str:
        lines = [
            f"shard parallelism ({self.schedule}): {self.samples} samples in "
            f"{self.seconds:.2f} s, {self.throughput:.1f} samples/s; shards: "
            + ", ".join(f"{m} {n}" for m, n in self.shards.items()),
            (
                f"{'rank':>4} {'tasks':>6} {'computing':>10} {'loading':>8} {'storing':>8} "
                f"{'waiting':>8} {'utilisation':>11} {'peak MiB':>9} {'budget MiB':>10}"
            ),
        ]
        for d in self.devices:
            waiting = self.seconds - d.busy
            lines.append(
                f"{d.rank:>4} {d.tasks:>6} {d.computing:>9.2f}s {d.loading:>7.2f}s "
                f"{d.storing:>7.2f}s {waiting:>7.2f}s {100 * self.utilisation(d):>10.0f}% "
                f"{d.peak_bytes / 2**20:>9.1f} {d.budget_bytes / 2**20:>10.1f}"
            )
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return dict(
            asdict(self),
            throughput=self.throughput,
            utilisation=[self.utilisation(d) for d in self.devices],
        )

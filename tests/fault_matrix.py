"""The fault matrix: one table of (fault, launch path, mode, moment) cells, each with the
outcome a user sees and the launcher's exit status. tests/test_fault_matrix.py runs every
cell on emulated hosts (the CI sample by default, the whole table with
`pytest -m fault_matrix`); docs/reference/fault-matrix.md renders the same table.

A cell's job: 3 emulated hosts of 2 ranks each (1000 Mbit/s links), the digits example,
`MXKV_LOST_SECONDS` as below, `--restarts 1`; the fault hits host h2 (group 1, ranks 2-3)
at the cell's moment."""

import os
import signal
from dataclasses import dataclass
from typing import Callable, Dict, List, Tuple

from mxkv_hybrid.testing.cluster import Cluster

LOST_SECONDS = 10  # the job's MXKV_LOST_SECONDS (the default 30 would make every cell slow)
TARGET = "h2"  # the host every fault hits
GROUP = r"group 1 \(ranks 2-3\)"  # the group it holds, as the launcher names it


def _pids(cluster: Cluster, host: str, marker: str) -> List[int]:
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


def kill_one_rank(cluster: Cluster) -> None:
    """kill -9 of one training rank on the target host (its group's second rank)."""
    ranks = _pids(cluster, TARGET, "mxkv_hybrid.run")
    assert ranks, f"no rank runs on {TARGET}"
    os.kill(ranks[-1], signal.SIGKILL)


def kill_the_relay(cluster: Cluster) -> None:
    """kill -9 of the target host's relay, the host and its ranks staying up."""
    relays = _pids(cluster, TARGET, "mxkv_hybrid.launch.relay")
    assert relays, f"no relay runs on {TARGET}"
    for pid in relays:
        os.kill(pid, signal.SIGKILL)


FAULTS: Dict[str, Tuple[str, Callable[[Cluster], None]]] = {
    "kill-rank": ("kill -9 of one rank", kill_one_rank),
    "kill-relay": ("a relay killed on a live host", kill_the_relay),
}

PATHS: Dict[str, Tuple[str, List[str]]] = {
    "relays": ("-H group jobs, relays on", []),
    "trusted": ("-H group jobs, --trusted-network", ["--trusted-network"]),
}


@dataclass(frozen=True)
class Cell:
    """One case: `fault` (FAULTS) on `path` (PATHS) in `mode` at `moment`; the user sees
    `outcome`, the lines `named` (regular expressions) and the exit status `status`."""

    fault: str
    path: str
    mode: str
    moment: str
    outcome: str
    status: int
    named: Tuple[str, ...]
    ci: bool = False  # in the sample CI runs

    @property
    def name(self) -> str:
        return f"{self.fault}-{self.path}-{self.mode}-{self.moment}"


RESTARTS_AND_REJOINS = (
    rf"{GROUP} on {TARGET} was lost: its MPI job exited with status \d+.*restarting it in",
    rf"{GROUP} restarted \(restart 1\)",
    rf"restarted and finished: {GROUP} \(1 restart\(s\)\)",
)

RELAY_STARTED_AGAIN = (
    rf"the relay on {TARGET} exited with status \d+ while its host's ranks run; starting it again",
    rf"the relay on {TARGET} started again",
)

CELLS: List[Cell] = [
    Cell(
        "kill-rank",
        "relays",
        "easgd",
        "mid-training",
        "the group restarts and rejoins",
        0,
        RESTARTS_AND_REJOINS,
        ci=True,
    ),
    Cell(
        "kill-rank",
        "trusted",
        "easgd",
        "mid-training",
        "the group restarts and rejoins",
        0,
        RESTARTS_AND_REJOINS,
    ),
    Cell(
        "kill-relay",
        "relays",
        "easgd",
        "mid-training",
        "the job continues; the relay is started again",
        0,
        RELAY_STARTED_AGAIN,
        ci=True,
    ),
]

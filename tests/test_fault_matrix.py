"""Every cell of the fault matrix (tests/fault_matrix.py) on 3 emulated hosts: the fault hits
h2 at the cell's moment, and the job ends as the cell says: its exit status, the member
named, no traceback from our code, no wait to --timeout, nothing left on any host. The CI
sample runs by default; `pytest -m fault_matrix` runs the whole matrix."""

import re
from typing import Callable, Dict

import pytest
from fault_matrix import CELLS, FAULTS, LOST_SECONDS, PATHS, TARGET, Cell, pids, wait_until

from emulated import HostLauncher, assert_nothing_left, on_emulated_hosts

EPOCHS = 30
TIMEOUT = 150  # the job's --timeout: a cell that reaches it fails
pytestmark = on_emulated_hosts


def _mid_training(launcher: HostLauncher, cluster) -> None:
    launcher.wait_for(rf"^\[0\] epoch  3/{EPOCHS}", seconds=120)


def _while_ranks_start(launcher: HostLauncher, cluster) -> None:
    wait_until(lambda: pids(cluster, TARGET, "mxkv_hybrid.run"), 60, f"a rank on {TARGET}")


MOMENTS: Dict[str, Callable[[HostLauncher, object], None]] = {
    "mid-training": _mid_training,
    "while ranks start": _while_ranks_start,
}


def _parameters() -> list:
    cells = []
    for cell in CELLS:
        mark = pytest.mark.fault_matrix(ci=cell.ci)
        cells.append(pytest.param(cell, id=cell.name.replace(" ", "-"), marks=[mark]))
    return cells


@pytest.mark.parametrize("cell", _parameters())
def test_cell(cell: Cell, make_cluster):
    from fault_matrix import Target

    cluster = make_cluster(3, rate_mbit=1000)
    launcher = HostLauncher(
        cluster,
        "h1",
        ["-n", "6", "-H", "h1:2,h2:2,h3:2", "--servers", "1", "--restarts", "1"]
        + PATHS[cell.path][1],
        ["examples/train_digits.py", "--epochs", str(EPOCHS)],
        env={"MXKV_MODE": cell.mode, "MXKV_LOST_SECONDS": str(LOST_SECONDS)},
        timeout=TIMEOUT,
    )
    MOMENTS[cell.moment](launcher, cluster)
    FAULTS[cell.fault][1](Target(cluster, launcher.process.pid))
    job = launcher.finish()
    for line in cell.named:
        assert re.search(line, job.output), f"not named: {line}\n{job.output}"
    for line in cell.absent:
        assert not re.search(line, job.output), f"said: {line}\n{job.output}"
    assert job.returncode == cell.status, job.output
    assert "Traceback" not in job.output, job.output
    assert "timed out after" not in job.output, job.output
    assert_nothing_left(cluster, grace=LOST_SECONDS + 10)

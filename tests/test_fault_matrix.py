"""Every cell of the fault matrix (tests/fault_matrix.py) on 3 emulated hosts: the fault hits
h2 at the cell's moment, and the job ends as the cell says: its exit status, the member
named, no traceback from our code, no wait to --timeout, nothing left on any host. The CI
sample runs by default; `pytest -m fault_matrix` runs the whole matrix."""

import json
import os
import re
import time
from dataclasses import asdict
from typing import Callable, Dict, List, Optional

import pytest
from fault_matrix import (
    CELLS,
    FAULTS,
    HOST_RETURN_SECONDS,
    LOST_SECONDS,
    PATHS,
    TARGET,
    Cell,
    Target,
    pids,
    wait_until,
)

from mxkv_hybrid.capabilities import CAPABILITIES

from emulated import HostLauncher, assert_nothing_left, on_emulated_hosts

EPOCHS = 30
TIMEOUT = 150  # the job's --timeout: a cell that reaches it fails
# examples/benchmarks/fault_matrix.py sets it: each cell appends its figures there (JSON lines)
RESULTS = os.environ.get("FAULT_MATRIX_RESULTS")
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


def job_options(cell: Cell) -> List[str]:
    """mxkv-launch's options for `cell`: 6 ranks on h1..h3, one server where the mode has
    servers, --restarts 1, and the path's own (--one-job only where the mode would run
    group jobs without it)."""
    mode = CAPABILITIES[cell.mode]
    servers = ["--servers", "1"] if mode.servers else []
    path = [o for o in PATHS[cell.path][1] if o != "--one-job" or mode.group_jobs_by_default]
    return ["-n", "6", "-H", "h1:2,h2:2,h3:2", *servers, "--restarts", "1", *path]


@pytest.mark.parametrize("cell", _parameters())
def test_cell(cell: Cell, make_cluster):
    cluster = make_cluster(3, rate_mbit=1000)
    launcher = HostLauncher(
        cluster,
        "h1",
        job_options(cell),
        ["examples/train_digits.py", "--epochs", str(EPOCHS)],
        env={"MXKV_MODE": cell.mode, "MXKV_HOST_RETURN_SECONDS": str(HOST_RETURN_SECONDS)},
        timeout=TIMEOUT,
    )
    MOMENTS[cell.moment](launcher, cluster)
    FAULTS[cell.fault][1](Target(cluster, launcher.process.pid))
    struck = time.monotonic()
    named_after: Optional[float] = None
    if cell.named:  # how long until the launcher names the member
        try:
            launcher.wait_for(cell.named[0], seconds=TIMEOUT)
            named_after = time.monotonic() - struck
        except AssertionError:
            pass  # (never named: a problem below)
    job = launcher.finish()
    ended_after = time.monotonic() - struck
    problems = [f"not named: {line}" for line in cell.named if not re.search(line, job.output)]
    problems += [f"said: {line}" for line in cell.absent if re.search(line, job.output)]
    if job.returncode != cell.status:
        problems.append(f"exit status {job.returncode}, not {cell.status}")
    problems += [
        f"printed '{said}'" for said in ("Traceback", "timed out after") if said in job.output
    ]
    try:
        assert_nothing_left(cluster, grace=LOST_SECONDS + 10)
    except AssertionError as left:
        problems.append(str(left))
    if RESULTS:
        figures = {"named_after_s": named_after, "ended_after_s": ended_after}
        record = dict(asdict(cell), exit=job.returncode, problems=problems, **figures)
        if problems:  # what the launcher said, to see why
            record["launcher_said"] = re.findall(r"^mxkv-launch: .*$", job.output, re.MULTILINE)
        with open(RESULTS, "a") as results:
            results.write(json.dumps(record) + "\n")
    assert not problems, "\n".join(problems) + "\n" + job.output

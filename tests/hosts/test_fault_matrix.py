"""Every cell of the fault matrix (tests/tables/fault_matrix.py) on 3 emulated hosts: the fault hits
h2 at the cell's moment, and the job ends as the cell says: its exit status, the member
named, no traceback from our code, no wait to --timeout, nothing left on any host. The CI
sample runs by default; `pytest -m fault_matrix` runs the whole matrix."""

import json
import os
import re
import time
from dataclasses import asdict
from typing import Dict, List, Optional

import pytest

from mxkv_hybrid.capabilities import CAPABILITIES

from support.emulated import HostLauncher, Job, assert_nothing_left, on_emulated_hosts
from support.jobs import wait_for_line
from tables.fault_matrix import (
    CELLS,
    EPOCHS,
    EPOCHS_AT,
    FAULTS,
    HOST_RETURN_SECONDS,
    LOST_SECONDS,
    MOMENTS,
    PATHS,
    TARGET,
    Cell,
    Target,
)

TIMEOUT = 150  # the job's --timeout: a cell that reaches it fails
# examples/benchmarks/fault_matrix.py sets it: each cell appends its figures there (JSON lines)
RESULTS = os.environ.get("FAULT_MATRIX_RESULTS")
pytestmark = on_emulated_hosts


class ServedJob:
    """The serve-join path's job: --serve on h1, then a group --join-ed from each host
    (h1, h2, h3: groups 0-2), each with --restarts 1. Its lines are every launcher's, its
    exit status the serving launcher's."""

    def __init__(self, cluster, program: List[str], env: Dict[str, str]):
        serve = ["--servers", "1", "--groups", "3", "--serve", "--ps-host", cluster.address("h1")]
        self.serving = HostLauncher(cluster, "h1", serve, env=env, timeout=TIMEOUT)
        address = self.serving.wait_for(r"--join (\S+@[\d.]+:\d+) -n RANKS").group(1)
        self.joined: Dict[str, HostLauncher] = {}
        for group, host in enumerate(("h1", "h2", "h3")):
            join = ["--join", address, "-n", "2", "--restarts", "1"]
            self.joined[host] = HostLauncher(cluster, host, join, program, env, TIMEOUT)
            self.serving.wait_for(rf"group {group} joined")
        self.process = self.serving.process

    @property
    def lines(self) -> List[str]:
        return self.serving.lines + [line for j in self.joined.values() for line in j.lines]

    def wait_for(self, pattern: str, seconds: float = 60) -> re.Match:
        return wait_for_line(lambda: self.lines, pattern, seconds)

    def finish(self) -> Job:
        joined = [launcher.finish() for launcher in self.joined.values()]
        served = self.serving.finish()
        output = "\n".join([served.output, *(job.output for job in joined)])
        return Job(served.returncode, output)


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
    program = ["examples/train_digits.py", "--epochs", str(EPOCHS_AT.get(cell.moment, EPOCHS))]
    env = {"MXKV_MODE": cell.mode, "MXKV_HOST_RETURN_SECONDS": str(HOST_RETURN_SECONDS)}
    if cell.path == "serve-join":
        launcher = ServedJob(cluster, program, env)
        target = Target(cluster, launcher.process.pid, launcher.joined[TARGET].process.pid)
    else:
        launcher = HostLauncher(cluster, "h1", job_options(cell), program, env, TIMEOUT)
        target = Target(cluster, launcher.process.pid)
    MOMENTS[cell.moment](launcher, cluster)
    FAULTS[cell.fault][1](target)
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
        record["launcher_said"] = re.findall(r"^mxkv-launch: .*$", job.output, re.MULTILINE)
        with open(RESULTS, "a") as results:
            results.write(json.dumps(record) + "\n")
    assert not problems, "\n".join(problems) + "\n" + job.output

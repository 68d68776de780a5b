"""Every cell of the fault matrix (tests/fault_matrix.py) on 3 emulated hosts: the fault hits
h2 at the cell's moment, and the job ends as the cell says: its exit status, the member
named, no traceback from our code, no wait to --timeout, nothing left on any host. The CI
sample runs by default; `pytest -m fault_matrix` runs the whole matrix."""

import json
import os
import re
import signal
import time
from dataclasses import asdict
from typing import Callable, Dict, List, Optional

import pytest
from fault_matrix import (
    CELLS,
    FAULTS,
    GROUP,
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
from mxkv_hybrid.testing.faults import kill_a_rank, send

from conftest import wait_for_line
from emulated import HostLauncher, Job, assert_nothing_left, on_emulated_hosts

EPOCHS = 30
# a moment that comes later in the job trains longer: another group's restart comes first
EPOCHS_AT = {"after another group rejoined": 90}
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


def _mid_training(job, cluster) -> None:
    job.wait_for(rf"^\[0\] epoch  3/{EPOCHS}", seconds=120)


def _while_ranks_start(job, cluster) -> None:
    wait_until(lambda: pids(cluster, TARGET, "mxkv_hybrid.run"), 60, f"a rank on {TARGET}")


def _before_the_groups_meet(job, cluster) -> None:
    """h2's ranks run and their keepers called (mxkv_hybrid imported: MXNet's import and
    ps-lite's start, where the groups meet, take seconds more)."""
    wait_until(lambda: len(pids(cluster, TARGET, "keeper_process")) >= 2, 60, "h2's keepers")


def _at_the_finish_line(job, cluster) -> None:
    """Rank 0 (h1's group) has trained its last epoch: the groups are finishing."""
    job.wait_for(rf"^\[0\] epoch {EPOCHS}/{EPOCHS}", seconds=120)


def _during_a_restart(job, cluster) -> None:
    """h2's ranks killed mid-training (both at once: a survivor may print its failed
    collective's traceback), and their group's restart under way: the group was named
    lost and its new ranks run on h2."""
    _mid_training(job, cluster)
    before = set(pids(cluster, TARGET, "mxkv_hybrid.run"))
    send(sorted(before), signal.SIGKILL)
    job.wait_for(rf"{GROUP} on {TARGET} was lost: .*restarting it", seconds=60)
    wait_until(lambda: set(pids(cluster, TARGET, "mxkv_hybrid.run")) - before, 60, "h2's new ranks")


def _after_another_group_rejoined(job, cluster) -> None:
    """A rank of h3 killed mid-training, and its group (2, ranks 4-5) back in the job: its
    leader rejoined the servers' model, ps-lite's scheduler taking it as a recovering node."""
    job.wait_for(r"^\[0\] epoch  3/", seconds=120)
    kill_a_rank(cluster, "h3")
    job.wait_for(r"group 2 \(ranks 4-5\) restarted \(restart 1\): it rejoins", seconds=60)
    job.wait_for(r"^\[4\] mxkv_hybrid: group 2 rejoins \(restart 1\)", seconds=60)


MOMENTS: Dict[str, Callable[[object, object], None]] = {
    "mid-training": _mid_training,
    "while ranks start": _while_ranks_start,
    "before the groups meet": _before_the_groups_meet,
    "at the finish line": _at_the_finish_line,
    "during a restart": _during_a_restart,
    "after another group rejoined": _after_another_group_rejoined,
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

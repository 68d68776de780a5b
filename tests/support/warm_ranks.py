"""Warm ranks: one MPI job per rank count, started once a session through mxkv-launch, that
runs the worker scripts of many tests one after another (tests/workers/warm_rank.py), as
Horovod runs its tests in one `mpirun -np 2 pytest`. Each rank imports MXNet once instead
of once a test (about 1.3 s of CPU each time).

For jobs that need nothing of the launcher but the ranks (`launch_in` chooses): no
launcher options, no servers (modes allreduce and lasgd), no setting read when MXNet, MPI
or the package starts, and a job expected to end well (a rank that fails may leave the
others waiting in a collective until the test's timeout). A script that fails or hangs
ends its warm job; the next test starts a fresh one. At most WARM_JOBS are kept."""

import errno
import json
import os
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

import pytest

from mxkv_hybrid.capabilities import CAPABILITIES
from mxkv_hybrid.config import KNOBS

from support.jobs import JOB_TIMEOUT, Job, OutputLines, RunningJob, finish_job, launch, start_job
from support.paths import WORKERS

SESSION_SECONDS = 3600  # the warm job's --timeout: longer than any suite
WARM_JOBS = 4  # warm jobs kept at once (the least recently used is closed)
# settings read when a process starts (MXNet's engine, MPI's transport, the package's log
# level and --auto, easgd's transport) or at its exit (the timeline): a job with one
# gets processes of its own
READ_AT_START = (
    "MXNET_",
    "UCX_",
    "OMP_",
    "MXKV_TRANSPORT",
    "MXKV_LOG_LEVEL",
    "MXKV_AUTO",
    "MXKV_TIMELINE",
)
STREAMS = 2  # the markers come once on stdout and once on stderr


class WarmJob:
    """One warm job of `num_ranks` ranks, its tasks written to a FIFO per rank."""

    def __init__(self, num_ranks: int, folder: Path):
        self.num_ranks, self.folder = num_ranks, folder
        folder.mkdir(parents=True)
        for rank in range(num_ranks):
            os.mkfifo(folder / f"rank{rank}")
        self.job: RunningJob = start_job(
            num_ranks, "warm_rank.py", str(folder), timeout=SESSION_SECONDS
        )
        self.output = OutputLines(self.job.process)
        self.tasks = 0

    def alive(self) -> bool:
        return self.job.process.poll() is None

    def _send(self, task: Optional[dict], seconds: float) -> None:
        """Writes `task` to every rank's FIFO, waiting up to `seconds` for each to read."""
        text = json.dumps(task).encode()
        deadline = time.monotonic() + seconds
        for rank in range(self.num_ranks):
            while True:
                try:
                    fd = os.open(self.folder / f"rank{rank}", os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError as error:  # ENXIO: the rank has not opened it yet
                    if error.errno != errno.ENXIO or not self.alive():
                        raise
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"warm rank {rank} did not take a task") from error
                    time.sleep(0.01)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)

    def run(self, script: str, args: List[str], env: Dict[str, str], seconds: float) -> Job:
        """Runs `script args` on every rank with `env`; its Job (output as mxkv-launch's)."""
        self.tasks += 1
        task, first = self.tasks, len(self.output.lines)
        self._send({"id": task, "script": script, "args": args, "env": env}, seconds)
        deadline = time.monotonic() + seconds
        while not self._ended(task, first):
            if not self.alive() or time.monotonic() > deadline:
                raise TimeoutError(f"the warm job did not finish {script}:\n{self.output.output}")
            time.sleep(0.02)
        return self._job_of(task, first)

    def _ended(self, task: int, first: int) -> bool:
        ends = [line for line in self.output.lines[first:] if f"WARM-END {task} " in line]
        return len(ends) == STREAMS * self.num_ranks

    def _job_of(self, task: int, first: int) -> Job:
        """The lines each rank wrote between its markers of `task`, and the worst status."""
        lines: List[str] = []
        statuses = []
        for rank in range(self.num_ranks):
            prefix = f"[{rank}] "
            inside, ends = False, 0
            for line in self.output.lines[first:]:
                if not line.startswith(prefix):
                    continue
                text = line[len(prefix) :]
                if text == f"WARM-BEGIN {task}":
                    inside = True
                elif text.startswith(f"WARM-END {task} "):
                    statuses.append(int(text.split()[-1]))
                    ends += 1
                    inside = ends < STREAMS
                elif inside:
                    lines.append(line)
        return Job(next((s for s in statuses if s != 0), 0), "\n".join(lines))

    def close(self) -> None:
        if self.alive():
            try:
                self._send(None, 10)
            except (OSError, TimeoutError):
                pass  # (finish_job kills what is left)
        self.job.timeout = 30
        finish_job(self.job)


class WarmRanks:
    """The session's warm jobs, one per rank count, each started at its first use."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.jobs: Dict[int, WarmJob] = {}
        self.started = 0

    def launch(
        self,
        num_ranks: int,
        script: str,
        *args: str,
        env: Optional[Dict[str, str]] = None,
        timeout: float = JOB_TIMEOUT,
    ) -> Job:
        """As support.jobs.launch(num_ranks, script, *args, env=env), on warm ranks."""
        warm = self.jobs.pop(num_ranks, None)
        if warm is None or not warm.alive():
            while len(self.jobs) >= WARM_JOBS:
                self.jobs.pop(next(iter(self.jobs))).close()
            self.started += 1
            warm = WarmJob(num_ranks, self.folder / f"job{self.started}")
        self.jobs[num_ranks] = warm  # (the most recently used, last)
        try:
            job = warm.run(str(WORKERS / script), list(args), dict(env or {}), timeout)
        except (OSError, TimeoutError):
            self.jobs.pop(num_ranks).close()
            raise
        if job.returncode != 0:  # a failed script may leave MPI unusable: start afresh
            self.jobs.pop(num_ranks).close()
        return job

    def close(self) -> None:
        for warm in self.jobs.values():
            warm.close()


def launch_in(
    warm_ranks: WarmRanks,
    num_ranks: int,
    script: str,
    *args: str,
    env: Optional[Dict[str, str]] = None,
    launcher_options: Sequence[str] = (),
    timeout: float = JOB_TIMEOUT,
) -> Job:
    """support.jobs.launch() of a job expected to end well: on warm ranks where it needs
    nothing of its own launcher or processes, else as a job of its own."""
    env = dict(env or {})
    mode = env.get("MXKV_MODE", KNOBS["MXKV_MODE"].default)
    if (
        launcher_options
        or script == "-m"
        or CAPABILITIES[mode].servers
        or any(name.startswith(READ_AT_START) for name in env)
    ):
        return launch(
            num_ranks, script, *args, env=env, launcher_options=launcher_options, timeout=timeout
        )
    return warm_ranks.launch(num_ranks, script, *args, env=env, timeout=timeout)


@pytest.fixture(scope="session")
def warm_ranks(tmp_path_factory) -> Iterator[WarmRanks]:
    ranks = WarmRanks(tmp_path_factory.mktemp("warm"))
    yield ranks
    ranks.close()

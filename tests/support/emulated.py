"""Helpers for tests on emulated hosts (mxkv_hybrid.testing.cluster): a fixture that makes
a fresh cluster per test (skipped, with the reason, where namespaces cannot be made), and
mxkv-launch run on one of its hosts with a hard timeout and nothing left behind."""

import os
import subprocess
import sys
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import pytest

from mxkv_hybrid.testing.cluster import Cluster, unavailable_reason

from support.jobs import Job, OutputLines, job_environment
from support.paths import WORKERS

JOB_TIMEOUT = 150  # seconds: --timeout of a job on emulated hosts; the test waits 30 s more
REASON = unavailable_reason()
# every test of emulated hosts (tests/hosts, `pytest -m hosts`): skipped, with the reason,
# where namespaces cannot be made
on_emulated_hosts = pytest.mark.skipif(REASON is not None, reason=f"no emulated hosts: {REASON}")


def launcher_environment(env: Optional[Dict[str, str]]) -> Dict[str, str]:
    """This environment without the knobs of other tests, with this venv's bin on PATH."""
    clean = job_environment()
    clean["PATH"] = os.path.dirname(sys.executable) + os.pathsep + clean.get("PATH", "")
    clean.setdefault("OMP_NUM_THREADS", "1")
    return dict(clean, **(env or {}))


class HostLauncher(OutputLines):
    """`mxkv-launch --timeout T OPTIONS [-- python PROGRAM]` started on one emulated host,
    its output lines collected as they come (PROGRAM: a worker script and its arguments)."""

    def __init__(
        self,
        cluster: Cluster,
        host: str,
        launcher_options: Sequence[str],
        program: Sequence[str] = (),
        env: Optional[Dict[str, str]] = None,
        timeout: float = JOB_TIMEOUT,
    ):
        command = [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "--timeout",
            str(timeout),
            *launcher_options,
        ]
        if program:
            script = program[0] if "/" in program[0] else str(WORKERS / program[0])
            command += ["--", "python", script, *program[1:]]
        self.timeout = timeout
        super().__init__(
            cluster.run(
                host,
                command,
                env=launcher_environment(env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )

    def finish(self) -> Job:
        """Waits for the launcher (its timeout and 30 s more, then kills it)."""
        try:
            self.process.wait(timeout=self.timeout + 30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        self.join_reader()
        return Job(self.process.returncode, self.output)


def launch_on(
    cluster: Cluster,
    host: str,
    launcher_options: Sequence[str],
    program: Sequence[str] = (),
    env: Optional[Dict[str, str]] = None,
    timeout: float = JOB_TIMEOUT,
) -> Job:
    """Runs a HostLauncher to its end; asserts that no process is left on any host."""
    job = HostLauncher(cluster, host, launcher_options, program, env, timeout).finish()
    assert_nothing_left(cluster)
    return job


def assert_nothing_left(cluster: Cluster, grace: float = 5.0) -> None:
    """No process runs on any host of `cluster` (after `grace` seconds to exit)."""
    deadline = time.monotonic() + grace
    while cluster.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = cluster.processes()
    described = []
    for pid in left:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
            described.append(f"{pid}: {command[:120]}")
        except OSError:
            continue
    assert not described, "processes left on the emulated hosts:\n" + "\n".join(described)


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., Cluster]]:
    """Emulated hosts : make_cluster(hosts, rate_mbit=None,
    interfaces=None), a started cluster, removed after the test (and checked to have no
    process left in it)."""
    made: List[Cluster] = []

    def make(
        hosts: int, rate_mbit: Optional[float] = None, interfaces: Optional[Dict[str, str]] = None
    ) -> Cluster:
        cluster = Cluster(hosts, rate_mbit, interfaces)
        cluster.start()
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()

"""mxkv-launch --serve / --join with real launchers, mpiexec jobs and ps-lite processes: the
groups started on their own become one job (mode sync: bitwise one MPI job's weights); a
wrong token, another mode or one group too many is refused, an address nobody serves is
reported at once, and a lost or failing group stops the others."""

import os
import re
import subprocess
import time
import uuid

import numpy as np

from mxkv_hybrid.launch.processes import free_port

from support import jobs
from support.jobs import JOB_TAG, OutputLines, job_environment, processes_of
from support.paths import WORKERS

TIMEOUT = 150


class Launcher(OutputLines):
    """An mxkv-launch process whose output lines are collected as they come."""

    def __init__(self, tag: str, mode: str, *options: str, **settings: str):
        env = job_environment()
        super().__init__(
            subprocess.Popen(
                [jobs.INTERPRETER, "-m", "mxkv_hybrid.launch", "--timeout", str(TIMEOUT), *options],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=dict(
                    env,
                    MXKV_MODE=mode,
                    **dict({"MXKV_PS_TIMEOUT": "20"}, **settings),
                    **{JOB_TAG: tag},
                ),
            )
        )

    def finish(self) -> int:
        code = self.process.wait(timeout=TIMEOUT + 30)
        self.join_reader()
        return code


def train(
    address: str, tag: str, out, mode: str = "easgd", ranks: int = 2, **settings: str
) -> Launcher:
    return Launcher(
        tag,
        mode,
        "--join",
        address,
        "-n",
        str(ranks),
        "--",
        "python",
        str(WORKERS / "group_job_digits.py"),
        str(out),
        "30",
        "0.1",
        **settings,
    )


def test_groups_started_separately_join_one_job(tmp_path):
    tag = uuid.uuid4().hex
    launchers = []
    try:
        serving = Launcher(tag, "easgd", "--servers", "1", "--groups", "2", "--serve")
        launchers.append(serving)
        address = serving.wait_for(r"--join (\S+@127\.0\.0\.1:\d+) -n RANKS").group(1)
        # the two groups stay before their end until the refusals are checked
        gate = tmp_path / "refusals checked"
        launchers += [train(address, tag, tmp_path, HOLD_UNTIL=str(gate)) for _ in range(2)]
        serving.wait_for(r"group 1 joined with 2 rank\(s\) \(2 of 2\)")
        token, _, where = address.partition("@")
        refused = {  # while the two groups train
            "declared with 2 group(s) and all of them have joined": train(address, tag, tmp_path),
            "the token does not match": train("0" * len(token) + "@" + where, tag, tmp_path),
            "this job trains in MXKV_MODE=easgd, and the group asked for async": train(
                address, tag, tmp_path, mode="async"
            ),
        }
        launchers += refused.values()
        for reason, launcher in refused.items():
            assert launcher.finish() == 2, launcher.output
            assert "mxkv-launch: not joined: " in launcher.output and reason in launcher.output, (
                launcher.output
            )
        gate.touch()
        groups = launchers[1:3]
        for launcher in groups:
            assert launcher.finish() == 0, launcher.output
        assert serving.finish() == 0, serving.output
    finally:
        (tmp_path / "refusals checked").touch()
        for launcher in launchers:
            if launcher.process.poll() is None:
                launcher.process.kill()
        leftovers = processes_of(tag)
        for pid in leftovers:
            os.kill(pid, 9)
    assert not leftovers, f"processes left behind: {leftovers}"
    joined = sorted(
        re.search(
            r"joined as group (\d) \(ranks (\d)-(\d)\) "
            r"of 2 group\(s\), 4 rank\(s\)",
            g.output,
        ).groups()
        for g in groups
    )
    assert joined == [("0", "0", "1"), ("1", "2", "3")]
    for group in (0, 1):
        assert (
            f"mxkv-launch: group {group} (2 rank(s), joined from 127.0.0.1) ended with status 0"
        ) in serving.output
    found = {r: dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(4)}
    for prefix in ("initial/", "final/"):  # one start (the centre) and one end (consensus)
        for rank in range(1, 4):
            for name in (n for n in found[0] if n.startswith(prefix)):
                assert np.array_equal(found[rank][name], found[0][name]), (rank, name)
    assert float(found[0]["accuracy"]) > 0.9


def test_a_join_nobody_serves_is_reported_at_once():
    tag = uuid.uuid4().hex
    launcher = Launcher(
        tag,
        "easgd",
        "--join",
        f"abc@127.0.0.1:{free_port('127.0.0.1')}",
        "-n",
        "2",
        "--",
        "python",
        "x.py",
    )
    assert launcher.finish() == 2
    # refused at once: the message names the refusal, not a wait it did not do
    assert re.search(
        r"not joined: could not reach the job at 127\.0\.0\.1:\d+: \[Errno 111\] "
        r"Connection refused; is mxkv-launch --serve running there",
        launcher.output,
    ), launcher.output
    assert not processes_of(tag)


def test_sync_groups_joined_separately_train_as_one_mpi_job_does(tmp_path):
    """Mode sync, 2 joined groups of 2 (ranks seeded apart): bitwise the weights of one MPI
    job with the same groups."""
    tag = uuid.uuid4().hex
    serving = Launcher(tag, "sync", "--servers", "1", "--groups", "2", "--serve")
    address = serving.wait_for(r"--join (\S+@127\.0\.0\.1:\d+) -n RANKS").group(1)
    program = ["--", "python", str(WORKERS / "train_convex.py"), str(tmp_path / "joined"), "60"]
    first = Launcher(tag, "sync", "--join", address, "-n", "2", *program)
    serving.wait_for(r"group 0 joined")  # the groups number by their order of joining
    second = Launcher(tag, "sync", "--join", address, "-n", "2", *program)
    for launcher in (first, second, serving):
        assert launcher.finish() == 0, launcher.output
    assert not processes_of(tag)
    one_job = Launcher(
        tag,
        "sync",
        "-n",
        "4",
        "--group-size",
        "2",
        "--servers",
        "1",
        "--",
        "python",
        str(WORKERS / "train_convex.py"),
        str(tmp_path / "one"),
        "60",
    )
    assert one_job.finish() == 0, one_job.output
    for rank in range(4):
        joined, one = (dict(np.load(tmp_path / d / f"rank{rank}.npz")) for d in ("joined", "one"))
        for name in one:
            assert np.array_equal(joined[name], one[name]), (rank, name)


def test_a_lost_sync_group_joined_separately_stops_the_other(tmp_path):
    """Mode sync, 2 joined groups; rank 2 (the first of group 1) is killed at its 20th step.
    The servers wait for every group's gradients, so the serving launcher orders group 0's
    launcher to stop, naming group 1: it ends with status 1 at once, where waiting would
    have ended it after MXKV_PS_TIMEOUT (600 s here) or the launchers' --timeout (124)."""
    tag = uuid.uuid4().hex
    settings = {"MXKV_PS_TIMEOUT": "600", "MXKV_FAULT": "kill:rank=2:step=20"}
    serving = Launcher(tag, "sync", "--servers", "1", "--groups", "2", "--serve", **settings)
    address = serving.wait_for(r"--join (\S+@127\.0\.0\.1:\d+) -n RANKS").group(1)
    program = ["--", "python", str(WORKERS / "train_convex.py"), str(tmp_path), "400"]
    first = Launcher(tag, "sync", "--join", address, "-n", "2", *program, **settings)
    serving.wait_for(r"group 0 joined")
    second = Launcher(tag, "sync", "--join", address, "-n", "2", *program, **settings)
    for launcher in (first, second, serving):
        assert launcher.finish() == 1, launcher.output
    assert not processes_of(tag)
    lost = re.escape(
        "group 1 (2 rank(s), joined from 127.0.0.1) ended with status 1, and in "
        "MXKV_MODE=sync the servers "
        "wait for every group's gradients, so the other groups cannot go on"
    )
    assert re.search(f"mxkv-launch: {lost}: stopping them", serving.output), serving.output
    assert re.search(f"mxkv-launch: {lost}: stopping this group", first.output), first.output
    assert "mxkv-launch: 1 of 1 groups lost: group 1 (ranks 2-3)" in second.output, second.output
    assert (
        "mxkv-launch: group 0 (2 rank(s), joined from 127.0.0.1) ended with status 1"
        in serving.output
    )
    assert not list(tmp_path.glob("rank*.npz"))  # no group got to the end


def test_a_rank_that_fails_before_its_store_in_a_joined_group_stops_every_group():
    """easgd, 2 joined groups; rank 3 (group 1's second) exits 1 before it creates its
    store, while its group's rank 2 and group 0 wait at ps-lite's start, which waits for
    every group: its launcher ends its MPI job (the script told it its status), the serving
    launcher stops group 0, and every launcher exits 1 within 10 s of the failure, naming
    the rank; nothing is left."""
    tag = uuid.uuid4().hex
    program = ["--", "python", str(WORKERS / "fail.py"), "early", "3"]
    serving = Launcher(tag, "easgd", "--servers", "1", "--groups", "2", "--serve")
    address = serving.wait_for(r"--join (\S+@127\.0\.0\.1:\d+) -n RANKS").group(1)
    first = Launcher(tag, "easgd", "--join", address, "-n", "2", *program)
    serving.wait_for(r"group 0 joined")
    second = Launcher(tag, "easgd", "--join", address, "-n", "2", *program)
    second.wait_for(r"rank 3 cannot read its data")
    failed = time.monotonic()
    for launcher in (second, first, serving):
        assert launcher.finish() == 1, launcher.output
    assert time.monotonic() - failed < 10, (first.output, second.output, serving.output)
    assert not processes_of(tag)
    assert re.search(
        r"group 1 \(ranks 2-3\) failed: rank 3's script exited with status 1 \d+ s ago, and "
        r"the other ranks went on: .*, and the launcher ends its MPI job",
        second.output,
    ), second.output
    assert "so the other groups cannot go on: stopping this group" in first.output, first.output


def test_check_reports_on_each_joined_group(tmp_path):
    """--join --check: each joined group's leader reports on its group (its ranks in the
    whole job, the servers it reached, a metric combined over its own ranks in easgd)."""
    tag = uuid.uuid4().hex
    serving = Launcher(tag, "easgd", "--servers", "1", "--groups", "2", "--serve")
    address = serving.wait_for(r"--join (\S+@127\.0\.0\.1:\d+) -n RANKS").group(1)
    first = Launcher(tag, "easgd", "--join", address, "-n", "2", "--check")
    serving.wait_for(r"group 0 joined")
    second = Launcher(tag, "easgd", "--join", address, "-n", "2", "--check")
    for launcher in (first, second, serving):
        assert launcher.finish() == 0, launcher.output
    assert not processes_of(tag)
    for group, launcher in enumerate((first, second)):
        leader = 2 * group
        assert (
            f"groups:     group {group} of 2 as its own MPI job: ranks {leader}-{leader + 1} "
            f"of 4; leader (talks to the servers): rank {leader}" in launcher.output
        ), launcher.output
        assert "servers:    1 server(s) answered" in launcher.output, launcher.output
        assert (
            launcher.output.count(
                f"correct on every rank (combined over ranks [{leader}, {leader + 1}])"
            )
            == 2
        ), launcher.output
        assert "result:     OK" in launcher.output, launcher.output

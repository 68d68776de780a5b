"""mxkv-launch --group-jobs on real jobs: each group its own MPI job, joined only through real
ps-lite servers. Groups start from the same weights and end on the one model the mode
delivers; a lost group ends alone, is restarted, or (mode sync) stops the others; --check
and --dry-run report each group job."""

import json
import os
import re
import subprocess
from typing import List

import numpy as np
import pytest

from mxkv_hybrid.launch.group_jobs import (
    plan_groups,
)

from support import jobs
from support.checks import assert_same_on_every_rank, load_ranks, rank_files
from support.jobs import Job, launch


def train(job_dir, num_ranks, mode, epochs, lr, env=None, restarts=0, checkpoint=()) -> Job:
    """group_job_digits.py in groups of 2, each its own MPI job (`checkpoint`: its
    directory and how many steps apart it is saved)."""
    return launch(
        num_ranks,
        "group_job_digits.py",
        str(job_dir),
        str(epochs),
        str(lr),
        *map(str, checkpoint),
        env=dict({"MXKV_MODE": mode, "MXKV_PS_TIMEOUT": "5"}, **(env or {})),
        launcher_options=[
            "--group-size",
            "2",
            "--servers",
            "1",
            "--group-jobs",
            "--restarts",
            str(restarts),
        ],
        timeout=150,
    )


# Asynchronous SGD without momentum: with momentum 0.9 the groups' stale updates made the
# servers' model diverge (accuracy 0.1, chance, in 1 of 12 runs at lr 0.03; stale
# gradients, docs/modes/async.md), a failure of the optimizer's settings, not of what
# these tests check
ASYNC_SAFE = {"MOMENTUM": "0"}


def checksum(arrays, prefix):
    return sum(float(a.astype(np.float64).sum()) for n, a in arrays.items() if n.startswith(prefix))


@pytest.mark.own_processes  # (which rank ended first)
def test_a_lost_easgd_group_ends_alone_and_the_others_finish(job_dir):
    """3 groups of 2; rank 2 (group 1) is killed at its 20th step. Groups 0 and 2 run every
    step, go on at the finish line as soon as the launcher gave group 1 up (not after
    MXKV_PS_TIMEOUT without progress), and take the centre; the launcher names the lost
    group and its first rank to end."""
    epochs = 30  # 20 once ended at 0.947 in CI, under load
    job = train(job_dir, 6, "easgd", epochs, 0.1, {"MXKV_FAULT": "kill:rank=2:step=20"})
    assert job.returncode == 1, job.output
    # A rank of the lost group is named first: rank 2, or, under load, rank 3, which
    # mpiexec stopped after it (seen once in CI: rank 2 killed itself, and its threads and
    # memory took longer to go than its mate's); the naming itself is test_failures.py's
    assert re.search(
        r"mxkv-launch: group 1 \(ranks 2-3\) was lost: its MPI job exited with "
        r"status \d+; ranks? [23] \(pid \d+",
        job.output,
    ), job.output
    assert "mxkv-launch: 1 of 3 groups lost: group 1 (ranks 2-3)" in job.output
    for leader in (0, 4):
        assert any(
            "group(s) [1] were given up by the launcher (lost, no restart left)" in line
            for line in job.lines_of(leader)
        ), job.output
    assert not (job_dir / "rank2.npz").exists() and not (job_dir / "rank3.npz").exists()
    found = rank_files(job_dir, (0, 1, 4, 5))
    steps_per_epoch = 1437 // 6 // 32  # the training split of the digits over 6 ranks
    assert all(int(f["steps"]) == epochs * steps_per_epoch for f in found.values())
    assert_same_on_every_rank(found, "initial/")  # every group started from the centre
    assert_same_on_every_rank(found, "final/")  # consensus: the centre
    # the centre's accuracy on the 360 held-out digits: 0.964-0.978 in 4 quiet runs (mean
    # 0.970); a 360-image estimate of p = 0.97 has a std of sqrt(p (1 - p) / 360) = 0.009,
    # and 4 of them below the mean is 0.934 (0.95, 2.2 std below, failed at 0.947 in a suite
    # run under load): a centre the groups did not train scores about 0.1
    assert float(found[0]["accuracy"]) >= 0.93, job.output


@pytest.mark.own_processes  # (which rank ended first)
def test_a_group_that_fails_before_the_groups_meet_stops_the_others_at_once():
    """Group 1 exits before its store exists: the others, held at ps-lite's start (which
    waits for every group), are stopped at once. Control (the launcher before this): they
    waited there until MXKV_PS_TIMEOUT ended them, each naming its own timeout."""
    job = launch(
        4,
        "fail.py",
        "leave",
        env={"MXKV_MODE": "easgd", "MXKV_PS_TIMEOUT": "60"},
        launcher_options=["--group-size", "2", "--servers", "1"],
        timeout=120,
    )
    assert job.returncode == 1, job.output
    # named by its MPI job's exit, or (when one rank's exit lags the other's by seconds,
    # as under load) by the first script's exit while the other rank went on
    assert re.search(
        r"group 1 \(ranks 2-3\) (was lost: its MPI job exited with status 1; "
        r"|failed: rank [23]'s script exited with status 1 )",
        job.output,
    ), job.output
    assert (
        "it was lost before the groups met at the parameter server, whose start waits for "
        "all, so the other groups cannot go on: stopping them"
    ) in job.output
    assert "MXKV_PS_TIMEOUT" not in job.output


def test_async_groups_start_from_and_end_on_the_servers_weights(job_dir):
    """2 groups of 2, ranks seeded apart: every rank starts from the weights the servers
    kept and ends on the servers' weights after both groups' last update; the lines, the
    step summary and the timeline carry the ranks' numbers in the whole job."""
    epochs = 12
    timeline = job_dir / "timeline.json"
    job = train(
        job_dir,
        4,
        "async",
        epochs,
        0.1,
        {"MXKV_TIMELINE": str(timeline), "MXKV_SUMMARY_EVERY": "50", **ASYNC_SAFE},
    )
    assert job.returncode == 0, job.output
    for rank in range(4):
        assert f"rank {rank} of 4 starts" in job.lines_of(rank), job.output
    for group, leader in ((0, 0), (1, 2)):  # one summary line per group job, by its leader
        assert any(
            line.startswith(f"mxkv_hybrid summary: group {group}, steps 1-50, 2 rank(s)")
            for line in job.lines_of(leader)
        ), job.output
    events = json.loads(timeline.read_text())["traceEvents"]  # the group jobs' parts, merged
    assert {e["pid"] for e in events} == {0, 1, 2, 3}
    found = rank_files(job_dir, range(4))
    assert all(int(f["steps"]) == epochs * (1437 // 4 // 32) for f in found.values())
    assert_same_on_every_rank(found, "initial/")
    assert_same_on_every_rank(found, "final/")
    # the servers' model on the 360 held-out digits: 0.917-0.947 in 6 quiet runs (mean
    # 0.932); a 360-image estimate of p = 0.93 has a std of sqrt(p (1 - p) / 360) = 0.013,
    # and 4 of them below the mean is 0.88: weights the groups did not train score about 0.1
    assert float(found[0]["accuracy"]) >= 0.88, job.output


# The accuracy of the model every rank ends on, on the 360 held-out digits, in 4 quiet runs:
# easgd 0.964-0.981 (mean 0.973), async 0.917-0.931 (mean 0.925). A 360-image estimate of p
# has a std of sqrt(p (1 - p) / 360), 0.009 and 0.014 here; the bounds are the means less 4
# of them. A model the restart undid scores about 0.1 (the servers' first weights).
@pytest.mark.parametrize(
    "mode, ranks, epochs, lr, start, recorded, accuracy",
    [
        ("easgd", 6, 20, 0.1, "the centre", 16, 0.93),  # tau 4: its last exchange, at step 16
        ("async", 4, 12, 0.1, "the servers' weights", 19, 0.87),  # every step is pushed
    ],
)
@pytest.mark.own_processes  # (which rank ended first)
def test_a_lost_group_is_restarted_and_rejoins_the_servers_model(
    job_dir, mode, ranks, epochs, lr, start, recorded, accuracy
):
    """--restarts 1: group 1, lost at rank 2's 20th step, is started again (MXKV_FAULT does
    not fire twice), its leader re-enters ps-lite in the dead leader's place, and its ranks
    start from the model the servers hold then: the checksum the leader read is that of
    their first weights, which are no longer where the job started. The group trains only
    the steps it had left: from the last step its leader reported to the servers (easgd:
    its last elastic exchange; async: its last push). Every group finishes."""
    job = train(
        job_dir,
        ranks,
        mode,
        epochs,
        lr,
        {
            "MXKV_FAULT": "kill:rank=2:step=20",
            "MXKV_PS_TIMEOUT": "30",
            **(ASYNC_SAFE if mode == "async" else {}),
        },
        restarts=1,
    )
    assert job.returncode == 0, job.output
    assert re.search(
        r"group 1 \(ranks 2-3\) was lost: .*; restarting it in \d+ s \(restart 1 "
        r"of 1\)",
        job.output,
    ), job.output
    assert "group 1 (ranks 2-3) restarted (restart 1)" in job.output
    assert "restarted and finished: group 1 (ranks 2-3) (1 restart(s))" in job.output
    rejoined = re.search(
        r"group 1 rejoins \(restart 1\): its ranks start from (.+) after (\d+) "
        r"steps of the groups, at step (\d+) of its own \(checksum "
        r"([-0-9.e+]+)\)",
        "\n".join(job.lines_of(2)),
    )
    assert rejoined and rejoined.group(1) == start, job.output
    assert int(rejoined.group(3)) == recorded and int(rejoined.group(2)) > recorded, job.output
    found = rank_files(job_dir, range(ranks))
    total = epochs * (1437 // ranks // 32)
    assert all(int(f["steps"]) == total for f in found.values())
    for rank, f in found.items():  # the rejoined group skipped the steps it had taken
        done = recorded if rank in (2, 3) else 0
        assert (int(f["steps_done"]), int(f["trained"])) == (done, total - done), rank
    assert_same_on_every_rank({r: found[r] for r in (2, 3)}, "initial/")
    assert checksum(found[2], "initial/") == pytest.approx(float(rejoined.group(4)), rel=1e-6)
    assert checksum(found[2], "initial/") != pytest.approx(checksum(found[0], "initial/"), rel=1e-6)
    assert_same_on_every_rank(found, "final/")
    assert float(found[0]["accuracy"]) >= accuracy, job.output


def test_a_restarted_easgd_group_resumes_from_its_own_checkpoint(job_dir):
    """Each group job commits its own checkpoint (every 8 steps). Group 1 is lost at rank
    2's 22nd step, after its exchange at step 20 reached the servers; restarted, it resumes
    from its own checkpoint of step 16 (the weights and momentum it saved there, not the
    centre, which stays the one the servers kept) and trains the steps after it. Every
    group finishes on the centre."""
    epochs, total = 10, 10 * (1437 // 4 // 32)
    job = train(
        job_dir,
        4,
        "easgd",
        epochs,
        0.1,
        {"MXKV_FAULT": "kill:rank=2:step=22", "MXKV_PS_TIMEOUT": "30"},
        restarts=1,
        checkpoint=(job_dir / "checkpoint", 8),
    )
    assert job.returncode == 0, job.output
    assert "restarted and finished: group 1 (ranks 2-3) (1 restart(s))" in job.output
    assert re.search(
        r"group 1 rejoins \(restart 1\): its ranks start from the centre after "
        r"\d+ steps of the groups, at step 20 of its own",
        job.output,
    ), job.output
    assert re.search(
        r"mxkv_hybrid: group 1 resumed from checkpoint \S+ \(generation 2, "
        r'progress \{"step": 16\}\)',
        "\n".join(job.lines_of(2)),
    ), job.output
    found = rank_files(job_dir, range(4))
    for rank, f in found.items():
        done = 16 if rank in (2, 3) else 0
        assert (int(f["steps"]), int(f["steps_done"]), int(f["trained"])) == (
            total,
            done,
            total - done,
        ), rank
    for rank in (2, 3):  # bitwise the weights its group saved at step 16, in its first start
        saved = dict(np.load(job_dir / f"rank{rank}.step16.npz"))
        for name, value in saved.items():
            assert np.array_equal(found[rank][name.replace("saved/", "loaded/")], value), name
    assert not any(n.startswith("loaded/") for n in found[0])  # group 0 never resumed
    for group in (0, 1):
        manifest = json.loads((job_dir / "checkpoint" / f"manifest.group{group}.json").read_text())
        assert (
            manifest["group"],
            manifest["groups"],
            manifest["group_ranks"],
            manifest["ranks"],
            manifest["progress"],
        ) == (group, 2, 2, 4, {"step": total // 8 * 8}), manifest
    assert not (job_dir / "checkpoint" / "manifest.json").exists()
    assert_same_on_every_rank(found, "final/")
    # the centre on the 360 held-out digits: 0.956-0.964 in 4 quiet runs (mean 0.959); a
    # 360-image estimate of p = 0.96 has a std of 0.010, and 4 of them below the mean is
    # 0.918: a centre the groups did not train scores about 0.1
    assert float(found[0]["accuracy"]) >= 0.91, job.output


def test_a_stuck_rank_is_reported_with_its_number_in_the_whole_job(job_dir):
    """Rank 3 (group 1) hangs at its 5th step: the stall monitor of its group names ranks 2
    and 3 as the whole job numbers them and ends that group's job; group 0 finishes."""
    job = train(
        job_dir, 4, "easgd", 3, 0.1, {"MXKV_FAULT": "hang:rank=3:step=5", "MXKV_STALL_TIMEOUT": "3"}
    )
    assert job.returncode == 1, job.output
    report = "\n".join(job.lines_of(2))
    assert re.search(r"rank 2 on \S+ waited \d+ s in #\d+ .* Where the ranks are:", report), (
        job.output
    )
    assert re.search(r"rank 3 on \S+: working \(not in a collective\)", report), job.output
    assert "mxkv-launch: 1 of 2 groups lost: group 1 (ranks 2-3)" in job.output
    assert sorted(p.name for p in job_dir.glob("rank*.npz")) == ["rank0.npz", "rank1.npz"]


def test_sync_group_jobs_train_as_one_mpi_job_does(job_dir):
    """Mode sync, 2 groups of 2, ranks seeded apart: the group jobs start from group 0's
    weights (as one job starts from rank 0's) and end bitwise where one MPI job ends."""
    options = ["--group-size", "2", "--servers", "1"]
    runs = {}
    for layout in ("one job", "group jobs"):
        out = job_dir / layout.replace(" ", "_")
        job = launch(
            4,
            "train_convex.py",
            str(out),
            "60",
            env={"MXKV_MODE": "sync"},
            launcher_options=options + (["--group-jobs"] if layout == "group jobs" else []),
        )
        assert job.returncode == 0, job.output
        runs[layout] = load_ranks(out, 4)
    for rank, (mine, reference) in enumerate(zip(runs["group jobs"], runs["one job"])):
        for name in reference:
            assert np.array_equal(mine[name], reference[name]), (rank, name)


@pytest.mark.own_processes  # (which rank ended first)
def test_a_lost_sync_group_stops_the_others(job_dir):
    """The servers of mode sync wait for every group's gradients: when group 1 is lost the
    launcher ends group 0 at once (MXKV_PS_TIMEOUT is 600 s and --timeout 120 s here, so
    a group left waiting would end with the launcher's timeout, 124, instead)."""
    job = launch(
        4,
        "train_convex.py",
        str(job_dir),
        "200",
        env={"MXKV_MODE": "sync", "MXKV_PS_TIMEOUT": "600", "MXKV_FAULT": "kill:rank=2:step=20"},
        launcher_options=["--group-size", "2", "--servers", "1", "--group-jobs"],
        timeout=120,
    )
    assert job.returncode == 1, job.output
    assert re.search(
        r"group 1 \(ranks 2-3\) was lost: its MPI job exited with status \d+; "
        r"ranks? 2 \(pid",
        job.output,
    ), job.output  # with rank 3, if together
    assert (
        "in MXKV_MODE=sync the servers wait for every group's gradients, so the other "
        "groups cannot go on: stopping them" in job.output
    )
    assert not list(job_dir.glob("rank*.npz"))


def test_sync_group_jobs_refuse_checkpoints(job_dir):
    """docs/launcher.md: a sync group job cannot commit a checkpoint with the other
    groups, so the checkpoint calls (load_latest, the script's first) refuse it, naming the
    layout that can."""
    job = train(job_dir, 4, "sync", 1, 0.1, checkpoint=(job_dir / "checkpoints", 1))
    assert job.returncode == 1, job.output
    assert (
        "ConfigError: checkpoint.load_latest: in MXKV_MODE=sync every group must save and "
        "resume the same step, which only one MPI job commits together: start the job "
        "without --group-jobs / --join" in job.output
    ), job.output
    assert not (job_dir / "checkpoints").exists() or not any((job_dir / "checkpoints").iterdir())


def test_check_reports_each_group_job(job_dir):
    """--check with --group-jobs: each group job's leader reports on its group; in easgd a
    value that is not a weight is combined over the group's ranks, and says so."""
    job = launch(
        4,
        None,
        env={"MXKV_MODE": "easgd"},
        timeout=60,
        launcher_options=["--group-size", "2", "--servers", "1", "--group-jobs", "--check"],
    )
    assert job.returncode == 0, job.output
    for group, leader, ranks in ((0, 0, "[0, 1]"), (1, 2, "[2, 3]")):
        report = "\n".join(job.lines_of(leader))
        assert (
            f"groups:     group {group} of 2 as its own MPI job: ranks {leader}-{leader + 1} "
            f"of 4; leader (talks to the servers): rank {leader}" in report
        ), job.output
        assert report.count(f"correct on every rank (combined over ranks {ranks})") == 2, report
        assert "result:     OK" in report, report


def dry_run(*options: str) -> List[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MXKV_")}
    done = subprocess.run(
        [
            jobs.INTERPRETER,
            "-m",
            "mxkv_hybrid.launch",
            *options,
            "--servers",
            "1",
            "--group-jobs",
            "--dry-run",
            "--",
            "python",
            "x.py",
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        env=dict(env, MXKV_MODE="easgd"),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_dry_run_prints_one_mpi_job_per_group():
    lines = dry_run("-n", "5", "--group-size", "2")
    assert [line.split()[0] for line in lines] == [
        f"MXKV_GROUP_JOB={p.knob}" for p in plan_groups(5, 2)
    ], lines
    assert [line.split(" -n ")[1].split()[0] for line in lines] == ["2", "2", "1"]


@pytest.mark.parametrize("how", ["hosts", "hostfile"])
def test_without_a_group_size_each_host_is_a_group_job(tmp_path, how):
    if how == "hosts":
        options = ["-H", "nodea:2,nodeb:3"]
    else:
        (tmp_path / "hosts").write_text("nodea:2\n# a comment\nnodeb:3\n")
        options = ["--hostfile", str(tmp_path / "hosts")]
    lines = dry_run("-n", "5", *options)
    assert [line.split()[0] for line in lines] == [
        "MXKV_GROUP_JOB=group=0:groups=2:first_rank=0:ranks=5",
        "MXKV_GROUP_JOB=group=1:groups=2:first_rank=2:ranks=5",
    ], lines
    assert " -n 2 -prepend-rank -hosts nodea:2 " in lines[0]
    assert " -n 3 -prepend-rank -hosts nodeb:3 " in lines[1]

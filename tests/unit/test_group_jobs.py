"""mxkv-launch's group layouts, in one process: groups planned by size or host and numbered
in the whole job (MXKV_GROUP_JOB), the modes whose groups run as separate MPI jobs by
default, the layouts and restarts refused, and a checkpoint resumed only in its layout."""

from dataclasses import replace

import pytest

from mxkv_hybrid import checkpoint
from mxkv_hybrid.comm.topology import World
from mxkv_hybrid.config import Config, GroupJob, parse_group_job
from mxkv_hybrid.errors import ConfigError
from mxkv_hybrid.launch import launcher
from mxkv_hybrid.launch.group_jobs import (
    GroupPlan,
    plan_groups,
    plan_groups_by_host,
    renumbering,
    without,
)
from mxkv_hybrid.launch.launcher import parse_arguments


def test_a_checkpoint_is_resumed_only_in_the_layout_that_saved_it(tmp_path):
    """One MPI job's checkpoint (manifest.json) and separate group jobs' (one manifest per
    group) are refused by the other layout with a message, instead of starting afresh."""
    one_job = World(comm=None, rank=0, size=4, local_rank=0, local_size=4, host="h")
    group_job = replace(one_job, group_job=parse_group_job(plan_groups(4, 2)[1].knob))
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"saved by one MPI job .* runs as separate group jobs"):
        checkpoint._read_manifest(str(tmp_path), group_job)
    assert checkpoint._read_manifest(str(tmp_path), one_job) == {}
    (tmp_path / "manifest.json").unlink()
    (tmp_path / "manifest.group0.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"saved by separate group jobs .* runs as one MPI job"):
        checkpoint._read_manifest(str(tmp_path), one_job)
    assert checkpoint._read_manifest(str(tmp_path), group_job) is None  # group 1 saved none yet


@pytest.mark.parametrize(
    "options",
    [["--group-size", "2", "--servers", "1", "--group-jobs"], ["--join", "token@127.0.0.1:1"]],
)
def test_sync_group_jobs_refuse_restarts(monkeypatch, capsys, options):
    monkeypatch.setenv("MXKV_MODE", "sync")
    with pytest.raises(SystemExit):
        parse_arguments(["-n", "4", *options, "--restarts", "1", "--", "python", "x.py"])
    assert "a restarted group would have nobody to rejoin" in capsys.readouterr().err


def test_groups_are_planned_by_size_and_numbered_in_the_whole_job():
    on_this_host = dict(shares_host=True)
    assert plan_groups(5, 2) == [
        GroupPlan(0, 3, 0, 2, 5, **on_this_host),
        GroupPlan(1, 3, 2, 2, 5, **on_this_host),
        GroupPlan(2, 3, 4, 1, 5, **on_this_host),
    ]
    assert plan_groups(5, 2)[2].describe() == "group 2 (rank 4)"
    # their ranks are numbered on this host as one job's would be (they pick the GPUs)
    assert parse_group_job(plan_groups(5, 2)[1].knob) == GroupJob(1, 3, 2, 5, 2, 5)
    assert parse_group_job("group=1:groups=3:first_rank=2:ranks=5") == GroupJob(1, 3, 2, 5)
    assert renumbering("hydra", 4)(b"[1] loss 0.5\n") == b"[5] loss 0.5\n"
    assert renumbering("hydra", 4)(b"no prefix [1] \n") == b"no prefix [1] \n"
    assert renumbering("openmpi", 2)(b"[7,1]<stdout>:x\n") == b"[7,3]<stdout>:x\n"


def test_groups_left_out_before_they_met_leave_the_others_numbered_from_zero():
    by_host = plan_groups_by_host([("h1", 2), ("h2", 3), ("h3", 2)])
    assert without(by_host, [by_host[1]]) == [
        GroupPlan(0, 2, 0, 2, 4, "h1"),
        GroupPlan(1, 2, 2, 2, 4, "h3"),
    ]
    assert (
        without(plan_groups(5, 2), [plan_groups(5, 2)[0]])[1].knob
        == "group=1:groups=2:first_rank=2:ranks=3:local_first=2:local_ranks=3"
    )


@pytest.mark.parametrize(
    "text",
    [
        "group=3:groups=3:first_rank=0:ranks=6",
        "group=0:groups=2:first_rank=4:ranks=4",
        "group=0:groups=2:first_rank=0",
        "group=0:groups=2:first_rank=0:ranks=4:x=1",
        "1,2,3,4",
    ],
)
def test_a_malformed_group_job_is_refused(text):
    with pytest.raises(ConfigError, match="MXKV_GROUP_JOB"):
        Config.from_environment({"MXKV_MODE": "easgd", "MXKV_GROUP_JOB": text})


@pytest.mark.parametrize(
    "env",
    [
        {"MXKV_MODE": "lasgd"},
        {"MXKV_MODE": "allreduce"},
        {"MXKV_MODE": "easgd", "MXKV_EASGD_SYNC": "1"},
    ],
)
def test_modes_without_separate_groups_are_refused(env, monkeypatch, capsys):
    with pytest.raises(ConfigError, match="cannot run its groups as separate MPI jobs"):
        Config.from_environment(dict(env, MXKV_GROUP_JOB=plan_groups(4, 2)[0].knob))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit):
        parse_arguments(
            [
                "-n",
                "4",
                "--group-size",
                "2",
                "--servers",
                "1",
                "--group-jobs",
                "--",
                "python",
                "x.py",
            ]
        )
    assert "--group-jobs runs each group as its own MPI job" in capsys.readouterr().err


def test_the_launcher_and_the_ranks_accept_the_same_modes(monkeypatch):
    """One rule (config.separate_groups_refusal) for both: a stray MXKV_EASGD_SYNC=1 means
    nothing in mode sync, so neither refuses sync group jobs with it."""
    env = {"MXKV_MODE": "sync", "MXKV_EASGD_SYNC": "1"}
    Config.from_environment(dict(env, MXKV_GROUP_JOB=plan_groups(4, 2)[0].knob))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert parse_arguments(
        ["-n", "4", "--group-size", "2", "--servers", "1", "--group-jobs", "--", "python", "x.py"]
    ).group_jobs


@pytest.mark.parametrize(
    "mode, options, apart, said",
    [
        ("easgd", ["--group-size", "2"], True, False),
        ("async", ["--group-size", "2"], True, False),
        ("async", ["-H", "nodea:2,nodeb:2"], True, False),  # one group per host
        ("easgd", ["--group-size", "2", "--one-job"], False, False),
        ("sync", ["--group-size", "2"], False, False),  # its groups cannot outlive each other
        ("easgd", ["--group-size", "4"], False, False),  # one group: nothing to keep apart
        # one MPI job across hosts, where a lost host ends every group: never silently
        ("async", ["-H", "nodea:2,nodeb:1"], False, "slots add up to 3, not -n 4"),
        (
            "async",
            ["--group-size", "2", "-H", "nodea:2,nodeb:2"],
            False,
            "both --group-size and the hosts are given",
        ),
        ("async", ["--group-size", "2", "-H", "nodea:2,nodeb:2", "--one-job"], False, False),
    ],
)
def test_async_and_easgd_groups_run_apart_by_default(
    monkeypatch, capsys, mode, options, apart, said
):
    monkeypatch.setenv("MXKV_MODE", mode)
    # the hosts are names only: where the scheduler listens is test_network_setup's matter
    monkeypatch.setattr(launcher, "place_scheduler", lambda parser, args: None)
    args = parse_arguments(["-n", "4", "--servers", "1", *options, "--", "python", "x.py"])
    assert (args.group_jobs, args.group_jobs_by_default) == (apart, apart)
    err = capsys.readouterr().err
    assert ("one MPI job of all 4 ranks" in err) == bool(said), err
    assert not said or said in err, err


@pytest.mark.parametrize("mode", ["allreduce", "lasgd"])
def test_group_size_sets_the_groups_without_servers_where_none_are_needed(monkeypatch, mode):
    monkeypatch.setenv("MXKV_MODE", mode)
    monkeypatch.delenv("MXKV_GROUP_SIZE", raising=False)
    args = parse_arguments(["-n", "4", "--group-size", "2", "--dry-run", "--", "python", "x.py"])
    assert args.group_size == 2 and not args.servers and not args.group_jobs


def test_group_size_without_servers_is_refused_where_they_join_the_groups(monkeypatch, capsys):
    monkeypatch.setenv("MXKV_MODE", "sync")
    with pytest.raises(SystemExit):
        parse_arguments(["-n", "4", "--group-size", "2", "--", "python", "x.py"])
    assert "need --servers in MXKV_MODE=sync" in capsys.readouterr().err


def test_synchronous_easgd_stays_one_mpi_job(monkeypatch):
    monkeypatch.setenv("MXKV_MODE", "easgd")
    monkeypatch.setenv("MXKV_EASGD_SYNC", "1")
    args = parse_arguments(
        ["-n", "4", "--servers", "1", "--group-size", "2", "--", "python", "x.py"]
    )
    assert not args.group_jobs


@pytest.mark.parametrize(
    "options, message",
    [
        (["--group-jobs", "--one-job"], "not allowed with argument"),
        (["--one-job"], "--one-job chooses one MPI job in the modes async, easgd"),  # mode sync
    ],
)
def test_contradictory_layouts_are_refused(monkeypatch, capsys, options, message):
    monkeypatch.setenv("MXKV_MODE", "sync")
    with pytest.raises(SystemExit):
        parse_arguments(
            ["-n", "4", "--servers", "1", "--group-size", "2", *options, "--", "python", "x.py"]
        )
    assert message in capsys.readouterr().err


def test_group_jobs_need_a_group_size(monkeypatch, capsys):
    monkeypatch.setenv("MXKV_MODE", "async")
    with pytest.raises(SystemExit):
        parse_arguments(["-n", "4", "--servers", "1", "--group-jobs", "--", "python", "x.py"])
    assert "--group-jobs needs --group-size" in capsys.readouterr().err


def test_negative_restarts_are_refused(capsys):
    with pytest.raises(SystemExit):
        parse_arguments(["-n", "2", "--restarts", "-1", "--", "python", "x.py"])
    assert "--restarts must not be negative" in capsys.readouterr().err

"""Network set-up across emulated hosts that cannot go wrong silently: the scheduler's
address chosen by the route towards the other hosts (sync across 2 hosts with no
--ps-host trains as one process does), a loopback or foreign --ps-host refused before
anything starts, a group that joins from a host whose interface has another name, and
--check naming the hosts that cannot reach each other."""

import re
import subprocess
import time
import uuid

import numpy as np

from mxkv_hybrid.launch.reach_check import CONNECT_SECONDS, REGISTER_SECONDS

from support.checks import assert_identical_across_ranks, assert_matches_reference, load_ranks
from support.emulated import (
    HostLauncher,
    assert_nothing_left,
    launch_on,
    on_emulated_hosts,
)

pytestmark = on_emulated_hosts

SYNC = {"MXKV_MODE": "sync"}


def test_sync_across_hosts_without_ps_host_matches_one_process(make_cluster, job_dir, references):
    """2 hosts x 2 ranks, a group per host, the server on h1: the launcher picks h1's
    address on the route towards h2, and the weights equal one process's."""
    cluster = make_cluster(2, rate_mbit=1000)
    job = launch_on(
        cluster,
        "h1",
        ["-n", "4", "-H", "h1:2,h2:2", "--servers", "1"],
        ["train_gluon.py", "--out", str(job_dir / "dist")],
        env=SYNC,
    )
    assert job.returncode == 0, job.output
    assert (
        f"this host's relay (ps-lite's way in from the other hosts; ps-lite itself listens "
        f"on loopback) listens on {cluster.address('h1')} (eth0)"
    ) in job.output
    weights = load_ranks(job_dir / "dist", 4)
    assert_identical_across_ranks(weights)
    assert_matches_reference(weights[0], references.weights("train_gluon.py", "--reference", "4"))


def test_a_ps_host_the_other_hosts_cannot_reach_is_refused_at_once(make_cluster, job_dir):
    cluster = make_cluster(2)
    options = ["-n", "4", "-H", "h1:2,h2:2", "--servers", "1"]
    program = ["train_gluon.py", "--out", str(job_dir)]
    loopback = launch_on(cluster, "h1", [*options, "--ps-host", "127.0.0.1"], program, env=SYNC)
    assert loopback.returncode == 2, loopback.output
    assert (
        f"--ps-host 127.0.0.1 is loopback, and the ranks or servers on h2 would look for "
        f"the scheduler on their own loopback: give --ps-host {cluster.address('h1')}"
        in loopback.output
    ), loopback.output
    foreign = launch_on(
        cluster, "h1", [*options, "--ps-host", cluster.address("h2")], program, env=SYNC
    )
    assert foreign.returncode == 2, foreign.output
    assert (
        f"--ps-host {cluster.address('h2')} is not an address of this machine (h1)"
        in foreign.output
    )
    unknown = launch_on(
        cluster, "h1", ["-n", "4", "-H", "h1:2,nowhere:2", "--servers", "1"], program, env=SYNC
    )
    assert unknown.returncode == 2 and "host nowhere does not resolve on h1" in unknown.output


def test_a_group_joins_from_a_host_whose_interface_has_another_name(make_cluster, tmp_path):
    """--serve on h1 with --ps-interface eth0; h2's only interface is ens5. Its group gets
    the scheduler's address, not h1's interface, and trains: every rank ends on the centre."""
    cluster = make_cluster(2, interfaces={"h2": "ens5"})
    tag = uuid.uuid4().hex
    env = {"MXKV_MODE": "easgd", "MXKV_PS_TIMEOUT": "20", "PYTEST_MXKV_JOB": tag}
    serving = HostLauncher(
        cluster,
        "h1",
        [
            "--servers",
            "1",
            "--groups",
            "2",
            "--serve",
            "--ps-host",
            cluster.address("h1"),
            "--ps-interface",
            "eth0",
        ],
        env=env,
    )
    address = serving.wait_for(r"--join (\S+@[\d.]+:\d+) -n RANKS").group(1)
    program = ["group_job_digits.py", str(tmp_path), "20", "0.1"]
    groups = [
        HostLauncher(cluster, host, ["--join", address, "-n", "2"], program, env=env)
        for host in ("h1", "h2")
    ]
    jobs = [group.finish() for group in groups]
    served = serving.finish()
    assert_nothing_left(cluster)
    for job in jobs:
        assert job.returncode == 0, job.output
    assert served.returncode == 0, served.output
    finals = [np.load(tmp_path / f"rank{r}.npz") for r in range(4)]
    for rank in range(1, 4):
        for name in (n for n in finals[0].files if n.startswith("final/")):
            assert np.array_equal(finals[rank][name], finals[0][name]), (rank, name)
    accuracy = float(finals[0]["accuracy"])
    assert accuracy >= 0.9, accuracy


def test_check_says_every_host_reaches_every_other_then_tests_as_on_one_host(make_cluster):
    cluster = make_cluster(2)
    job = launch_on(cluster, "h1", ["-n", "4", "-H", "h1:2,h2:2", "--check"])
    assert job.returncode == 0, job.output
    assert f"all 2 hosts reach this machine at {cluster.address('h1')}:" in job.output
    assert "result:" in job.output and "OK in" in job.output, job.output


def test_check_names_each_host_and_address_that_cannot_be_reached(make_cluster):
    """Before any MPI job, within REGISTER_SECONDS + CONNECT_SECONDS and a little: h2 has
    no route to h3 (h3's connections to h2 then go unanswered), then h3 is cut off."""
    cluster = make_cluster(3)
    options = ["-n", "6", "-H", "h1:2,h2:2,h3:2", "--check"]
    h2, h3 = cluster.address("h2"), cluster.address("h3")
    subprocess.run(cluster.command("h2", ["ip", "route", "add", "unreachable", h3]), check=True)
    started = time.monotonic()
    job = launch_on(cluster, "h1", options)
    assert time.monotonic() - started < REGISTER_SECONDS + CONNECT_SECONDS + 6, job.output
    assert job.returncode == 1, job.output
    assert re.search(rf"h2 \({h2}\) cannot reach h3 \({h3}:\d+\): No route to host", job.output)
    assert re.search(rf"h3 \({h3}\) cannot reach h2 \({h2}:\d+\): no answer within 3 s", job.output)
    assert "h1 (" not in job.output and "self-check" not in job.output, job.output

    cluster.cut("h3")
    job = launch_on(cluster, "h1", options)
    assert job.returncode == 1, job.output
    assert re.search(
        rf"h3: its probe never called this machine at {cluster.address('h1')}:"
        r"\d+ within 5 s: h3 cannot reach it",
        job.output,
    ), job.output

"""A host cut off mid-training (emulated hosts, easgd, one group job per host): the
launcher names the group and its host from its link's silence within MXKV_LOST_SECONDS, no
rank on another host crashes, the other groups finish (their finish line told by the
launcher that it gave the group up) at the accuracy they reach
undisturbed, the launcher exits by itself, and the ranks on the cut host end themselves
(their keeper no longer hears the launcher): nothing is left in any namespace."""

import re
import time

from support.emulated import (
    HostLauncher,
    assert_nothing_left,
    on_emulated_hosts,
)

pytestmark = on_emulated_hosts

LOST_SECONDS = 10
EASGD = {
    "MXKV_MODE": "easgd",
    "MXKV_LOST_SECONDS": str(LOST_SECONDS),
    "MXKV_PS_TIMEOUT": "15",
}  # how long a group not given up is waited for
# UCX fails a connection to a cut-off peer after its TCP keepalive (about 20 s by default)
FAST_UCX_FAILURE = {
    "UCX_TCP_KEEPIDLE": "1s",
    "UCX_TCP_KEEPINTVL": "1s",
    "UCX_TCP_KEEPCNT": "2",
    "UCX_KEEPALIVE_INTERVAL": "1s",
}


def assert_the_others_finished_and_h3_emptied(job, cluster) -> None:
    """No rank crashed, the groups left finished at >= 0.95, and the cut host's ranks ended
    themselves once their keepers missed the launcher: nothing is left anywhere."""
    assert "Segmentation fault" not in job.output and "terminate called" not in job.output
    accuracy = float(
        re.search(r"^\[0\] final test accuracy ([\d.]+)", job.output, re.MULTILINE).group(1)
    )
    assert accuracy >= 0.95, job.output
    deadline = time.monotonic() + LOST_SECONDS + 15
    while cluster.processes("h3") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert_nothing_left(cluster)


def test_a_host_cut_mid_training_is_named_and_the_others_finish(make_cluster):
    cluster = make_cluster(3, rate_mbit=1000)
    launcher = HostLauncher(
        cluster,
        "h1",
        ["-n", "6", "-H", "h1:2,h2:2,h3:2", "--servers", "1"],
        ["examples/train_digits.py", "--epochs", "40"],
        env=EASGD,
    )
    launcher.wait_for(r"^\[0\] epoch  3/40", seconds=120)
    cluster.cut("h3")
    job = launcher.finish()
    assert job.returncode == 1, job.output
    named = re.search(
        r"group 2 \(ranks 4-5\) on h3 was lost: rank [45] on h3 \(([\d.]+)\) was "
        r"last heard from (\d+) s ago \(MXKV_LOST_SECONDS=10\)",
        job.output,
    )
    assert named and named.group(1) == cluster.address("h3"), job.output
    assert "1 of 3 groups lost: group 2 (ranks 4-5)" in job.output
    for leader in (0, 2):  # told by the launcher, not after MXKV_PS_TIMEOUT without progress
        assert re.search(
            rf"^\[{leader}\] mxkv_hybrid: group {leader // 2}: group\(s\) \[2\] were "
            r"given up by the launcher",
            job.output,
            re.MULTILINE,
        ), job.output
    assert_the_others_finished_and_h3_emptied(job, cluster)


def running(cluster, host: str, script: str) -> bool:
    """Whether a rank of `script` runs on `host` (past its MPI start-up; not the launcher,
    whose command line names the script too)."""
    for pid in cluster.processes(host):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
            if script.encode() in command and b"mxkv_hybrid.run" in command:
                return True
        except OSError:
            continue
    return False


def test_a_host_cut_before_the_groups_meet_is_left_out_and_the_others_train(make_cluster):
    """h3 is cut once its ranks run, before ps-lite lets any group through its start (which
    waits for all of them): the launcher names h3's group within MXKV_LOST_SECONDS and
    starts the other two again without it, and they train to the accuracy two groups reach.
    Control (the launcher before this): the others waited in ps-lite's start until
    MXKV_PS_TIMEOUT ended them, every group lost."""
    cluster = make_cluster(3, rate_mbit=1000)
    launcher = HostLauncher(
        cluster,
        "h1",
        ["-n", "6", "-H", "h1:2,h2:2,h3:2", "--servers", "1"],
        ["examples/train_digits.py", "--epochs", "40"],
        env=EASGD,
    )
    deadline = time.monotonic() + 60
    while not running(cluster, "h3", "train_digits.py") and time.monotonic() < deadline:
        time.sleep(0.05)
    cluster.cut("h3")
    job = launcher.finish()
    assert job.returncode == 1, job.output
    named = re.search(
        r"group 2 \(ranks 4-5\) on h3 was lost before the groups met at the "
        r"parameter server: rank [45](, started)? on h3 .*"
        r"\((MXKV_LOST_SECONDS=10|a first call within 15 s)\): "
        r"its host is cut off or dead",
        job.output,
    )
    assert named, job.output
    assert (
        "starting 2 group(s) of 4 rank(s) again: group 0 (ranks 0-1) on h1, group 1 "
        "(ranks 2-3) on h2"
    ) in job.output
    assert "left out before the groups met: group 2 (ranks 4-5) on h3" in job.output
    assert_the_others_finished_and_h3_emptied(job, cluster)


def test_one_mpi_job_ends_cleanly_naming_the_cut_host(make_cluster):
    """One MPI world (--one-job) cannot go on without a host: it ends, naming the host, and
    no rank crashes. The stall monitor fires 8 s into the finish line's wait, after UCX has
    failed the connections to the cut host (FAST_UCX_FAILURE); control: with the monitor
    asking every rank, as before, ranks died with SIGSEGV in MPI_Isend (2 runs of 2)."""
    cluster = make_cluster(3, rate_mbit=1000)
    launcher = HostLauncher(
        cluster,
        "h1",
        ["-n", "6", "-H", "h1:2,h2:2,h3:2", "--group-size", "2", "--servers", "1", "--one-job"],
        ["examples/train_digits.py", "--epochs", "40"],
        env=dict(EASGD, MXKV_STALL_TIMEOUT="8", MXKV_LOST_SECONDS="20", **FAST_UCX_FAILURE),
    )
    launcher.wait_for(r"^\[0\] epoch  3/40", seconds=120)
    cluster.cut("h3")
    cut_at = time.monotonic()
    job = launcher.finish()
    ended_after = time.monotonic() - cut_at
    assert "Segmentation fault" not in job.output and "terminate called" not in job.output
    assert job.returncode == 1, job.output
    h3 = re.escape(f"on h3 ({cluster.address('h3')})")
    assert re.search(
        rf"rank [45] {h3}: the launcher last heard from it \d+ s ago \(its host "
        r"cut off or dead\): not asked",
        job.output,
    ), job.output
    assert re.search(
        rf"mxkv-launch: rank [0-3] ended, and rank [45] {h3}: the launcher last "
        r"heard from it \d+ s ago .* cannot go on without it",
        job.output,
    ), job.output
    assert ended_after < 20 + 10, job.output  # MXKV_LOST_SECONDS, and ending the job
    while cluster.processes("h3") and time.monotonic() < cut_at + 20 + 15:
        time.sleep(0.5)
    assert_nothing_left(cluster)


def test_a_healed_host_is_restarted_and_its_group_rejoins(make_cluster):
    """--restarts 1: h3 is cut, its group named lost; the link heals before the restart
    (PS_HEARTBEAT_TIMEOUT + 2 s later), and the restarted group rejoins the servers' model
    and finishes with the others, which waited for it at the finish line."""
    cluster = make_cluster(3, rate_mbit=1000)
    launcher = HostLauncher(
        cluster,
        "h1",
        ["-n", "6", "-H", "h1:2,h2:2,h3:2", "--servers", "1", "--restarts", "1"],
        ["examples/train_digits.py", "--epochs", "40"],
        env=dict(EASGD, MXKV_PS_TIMEOUT="40"),
    )
    launcher.wait_for(r"^\[0\] epoch  3/40", seconds=120)
    cluster.cut("h3")
    launcher.wait_for(
        r"group 2 \(ranks 4-5\) on h3 was lost: .* restarting it in", seconds=LOST_SECONDS + 15
    )
    cluster.heal("h3")
    job = launcher.finish()
    assert job.returncode == 0, job.output
    assert "group 2 (ranks 4-5) restarted (restart 1)" in job.output
    assert "restarted and finished: group 2 (ranks 4-5) (1 restart(s))" in job.output
    assert "Segmentation fault" not in job.output and "terminate called" not in job.output
    accuracy = float(
        re.search(r"^\[0\] final test accuracy ([\d.]+)", job.output, re.MULTILINE).group(1)
    )
    assert accuracy >= 0.95, job.output
    assert_nothing_left(cluster)


def test_a_joined_group_cut_off_is_named_by_both_launchers(make_cluster):
    """--serve on h1, a group --join-ed from each host, h3 cut mid-training: the serving
    launcher names h3's group and address from the rendezvous connection's silence, h3's
    launcher stops its group naming the serving launcher, both within MXKV_LOST_SECONDS;
    the other groups finish, told by the serving launcher that it gave h3's group up."""
    cluster = make_cluster(3, rate_mbit=1000)
    serving = HostLauncher(
        cluster,
        "h1",
        ["--servers", "1", "--groups", "3", "--serve", "--ps-host", cluster.address("h1")],
        env=EASGD,
    )
    address = serving.wait_for(r"--join (\S+@[\d.]+:\d+) -n RANKS").group(1)
    groups = {}
    for host in ("h1", "h2", "h3"):  # in turn: h1's group is group 0, with rank 0, which prints
        groups[host] = HostLauncher(
            cluster,
            host,
            ["--join", address, "-n", "2"],
            ["examples/train_digits.py", "--epochs", "40"],
            env=EASGD,
        )
        serving.wait_for(rf"group {len(groups) - 1} joined")
    groups["h1"].wait_for(r"^\[0\] epoch  3/40", seconds=120)
    cluster.cut("h3")
    jobs = {host: group.finish() for host, group in groups.items()}
    served = serving.finish()
    everything = served.output + "".join(job.output for job in jobs.values())
    assert "Segmentation fault" not in everything and "terminate called" not in everything
    assert re.search(
        rf"group \d \(2 rank\(s\), joined from {re.escape(cluster.address('h3'))}\) "
        r"was last heard from \d+ s ago \(MXKV_LOST_SECONDS=10\): its host is cut "
        "off or dead",
        served.output,
    ), served.output
    assert served.returncode == 1, served.output
    assert jobs["h3"].returncode == 1, jobs["h3"].output
    assert re.search(
        rf"the serving launcher at {re.escape(cluster.address('h1'))}:\d+ was last "
        r"heard from \d+ s ago \(MXKV_LOST_SECONDS=10\).*: stopping this group",
        jobs["h3"].output,
    ), jobs["h3"].output
    assert jobs["h1"].returncode == 0 and jobs["h2"].returncode == 0, everything
    # the serving launcher tells the others' launchers it gave h3's group up: h1's leader
    # goes on at once, not after MXKV_PS_TIMEOUT without progress
    assert (
        "group(s) [2] were given up by the launcher (lost, no restart left)" in jobs["h1"].output
    ), jobs["h1"].output
    accuracy = re.search(r"^\[0\] final test accuracy ([\d.]+)", jobs["h1"].output, re.MULTILINE)
    assert accuracy and float(accuracy.group(1)) >= 0.95, jobs["h1"].output
    assert_nothing_left(cluster)


def test_a_joined_group_cut_before_the_groups_meet_is_left_out_and_the_others_train(make_cluster):
    """--serve on h1, a group --join-ed from each host; h3 is cut once its ranks run, before
    ps-lite lets any group through its start (which waits for all): the serving launcher
    names h3's group from its silence within MXKV_LOST_SECONDS, leaves it out and starts
    fresh servers for two groups; the groups on h1 and h2 start again in their new places
    and train to the accuracy two groups reach; h3's launcher stops its group. Control (the
    launchers before this, this test): h1's and h2's groups ended with status 1 once
    MXKV_PS_TIMEOUT (15 s) passed in ps-lite's start, every group lost."""
    cluster = make_cluster(3, rate_mbit=1000)
    serving = HostLauncher(
        cluster,
        "h1",
        ["--servers", "1", "--groups", "3", "--serve", "--ps-host", cluster.address("h1")],
        env=EASGD,
    )
    address = serving.wait_for(r"--join (\S+@[\d.]+:\d+) -n RANKS").group(1)
    groups = {}
    for host in ("h1", "h2", "h3"):
        groups[host] = HostLauncher(
            cluster,
            host,
            ["--join", address, "-n", "2"],
            ["examples/train_digits.py", "--epochs", "40"],
            env=EASGD,
        )
        serving.wait_for(rf"group {len(groups) - 1} joined")
    deadline = time.monotonic() + 60
    while not running(cluster, "h3", "train_digits.py") and time.monotonic() < deadline:
        time.sleep(0.05)
    cluster.cut("h3")
    jobs = {host: group.finish() for host, group in groups.items()}
    served = serving.finish()
    everything = served.output + "".join(job.output for job in jobs.values())
    assert "Segmentation fault" not in everything and "terminate called" not in everything
    h1, h2, h3 = (re.escape(cluster.address(host)) for host in ("h1", "h2", "h3"))
    assert re.search(
        rf"group 2 \(2 rank\(s\), joined from {h3}\) was last heard from \d+ s ago "
        r"\(MXKV_LOST_SECONDS=10\)",
        served.output,
    ), served.output
    assert re.search(
        rf"group 2 \(2 rank\(s\), joined from {h3}\) went away without reporting "
        "before the groups met at the parameter server",
        served.output,
    ), served.output
    assert re.search(
        rf"2 group\(s\) start again: group 0 \(2 rank\(s\), joined from {h1}\), "
        rf"group 1 \(2 rank\(s\), joined from {h2}\)",
        served.output,
    ), served.output
    assert served.returncode == 1, served.output  # a group was left out
    for host, group in (("h1", 0), ("h2", 1)):
        assert jobs[host].returncode == 0, jobs[host].output
        assert (
            f"joined as group {group} (ranks {2 * group}-{2 * group + 1}) of 2 group(s)"
            in jobs[host].output
        ), jobs[host].output
    assert jobs["h3"].returncode == 1, jobs["h3"].output
    accuracy = re.search(r"^\[0\] final test accuracy ([\d.]+)", jobs["h1"].output, re.MULTILINE)
    assert accuracy and float(accuracy.group(1)) >= 0.95, jobs["h1"].output
    assert_nothing_left(cluster)

"""Where mxkv-launch's hosts come from without -H/--hostfile (launch/host_sources.py):
Slurm's hostlists expanded as Slurm does, PBS node files, MPI host files, values it cannot
read refused naming the variable; the launcher's mpiexec command under each scheduler, and
the examples in examples/cluster/ (checked with --dry-run)."""

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List

import pytest

from mxkv_hybrid.launch.host_sources import (
    HostList,
    MalformedHosts,
    expand_nodelist,
    expand_tasks_per_node,
    hosts_from_environment,
    read_mpi_hostfile,
    read_pbs_nodefile,
    slurm_hosts,
)

from conftest import (
    EXAMPLES,
    assert_identical_across_ranks,
    assert_matches_reference,
    job_environment,
    load_ranks,
)
from emulated import REASON as EMULATION_REASON
from emulated import launch_on

ROOT = EXAMPLES.parent
CLUSTER = EXAMPLES / "cluster"
SLURM_2X2 = {"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        # Slurm's documentation: slurm_hostlist_create(3), Slurm::Hostlist(3pm),
        # scontrol(1) `hostnames`, slurm.conf's node ranges (quickstart_admin)
        ("linux[1-3,6]", ["linux1", "linux2", "linux3", "linux6"]),
        ("node1,node[2-5,12]", ["node1", "node2", "node3", "node4", "node5", "node12"]),
        ("tux[1-3]", ["tux1", "tux2", "tux3"]),
        ("lx[15,18,32-33]", ["lx15", "lx18", "lx32", "lx33"]),
        (
            "rack[0-1]_blade[0-2]",
            [
                "rack0_blade0",
                "rack0_blade1",
                "rack0_blade2",
                "rack1_blade0",
                "rack1_blade1",
                "rack1_blade2",
            ],
        ),
        # zero padding: the width of a range's first number
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("rack[01-3]", ["rack01", "rack02", "rack03"]),
        (
            "node[01-03,07],gpu-a1,rack[1-2]-n[3-4]",
            [
                "node01",
                "node02",
                "node03",
                "node07",
                "gpu-a1",
                "rack1-n3",
                "rack1-n4",
                "rack2-n3",
                "rack2-n4",
            ],
        ),
        ("gpu-a[01-02]-ib", ["gpu-a01-ib", "gpu-a02-ib"]),  # text after the bracket (dims 1)
        ("tux1 tux2\ttux3,,tux4", ["tux1", "tux2", "tux3", "tux4"]),  # Slurm's separators
        # three brackets: Slurm's _push_range_list loops over the second, then the first,
        # then the last
        (
            "a[1-2]b[3-4]c[5-6]",
            ["a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"],
        ),
    ],
)
def test_nodelists_expand_as_slurm_expands_them(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize(
    "tasks, counts",
    [
        ("2(x3),1", [2, 2, 2, 1]),  # sbatch(1), SLURM_TASKS_PER_NODE
        ("1,2,1(x3),3,2", [1, 2, 1, 1, 1, 3, 2]),  # Slurm's env.c, uint16_array_to_str
        ("4", [4]),
    ],
)
def test_tasks_per_node_expand_their_repeats(tasks, counts):
    assert expand_tasks_per_node(tasks) == counts


def test_each_node_gets_its_task_count():
    assert slurm_hosts("node[01-03,07]", "2(x3),1") == [
        ("node01", 2),
        ("node02", 2),
        ("node03", 2),
        ("node07", 1),
    ]


@pytest.mark.parametrize(
    "nodelist, problem",
    [
        ("node[01-03", "unmatched or nested brackets"),
        ("node01]", "unmatched or nested brackets"),
        ("node[1-[2]]", "unmatched or nested brackets"),
        ("node[3-1]", "the range 3-1 in [3-1] goes down"),
        ("node[a-c]", "[a-c] holds 'a-c', not a number or a range lo-hi"),
        ("node[]", "[] holds '', not a number"),
        ("node[0-65536]", "holds more than 65536 hosts"),  # Slurm's MAX_RANGE
        (" , ", "no host names"),
    ],
)
def test_a_malformed_nodelist_is_named_with_its_value(nodelist, problem):
    with pytest.raises(MalformedHosts) as refused:
        expand_nodelist(nodelist)
    message = str(refused.value)
    assert message.startswith(f"SLURM_JOB_NODELIST={nodelist!r}: "), message
    assert problem in message and "expected a Slurm hostlist" in message, message


@pytest.mark.parametrize("tasks", ["2(x3", "0", "2(x0)", "2,,1", "two", ""])
def test_a_malformed_task_count_is_named_with_its_value(tasks):
    with pytest.raises(MalformedHosts, match=re.escape(f"SLURM_TASKS_PER_NODE={tasks!r}: ")):
        expand_tasks_per_node(tasks)


def test_task_counts_for_another_number_of_nodes_are_refused():
    with pytest.raises(MalformedHosts) as refused:
        slurm_hosts("node[01-03]", "2(x2)")
    assert str(refused.value).startswith(
        "SLURM_TASKS_PER_NODE='2(x2)': 2 task count(s) for the 3 node(s) of "
        "SLURM_JOB_NODELIST='node[01-03]'; expected one task count per node"
    )


def test_a_pbs_node_file_counts_each_hosts_lines_in_first_seen_order(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n2\nn1\nn2\n\nn1\nn3\nn2\n")
    assert read_pbs_nodefile(str(nodefile)) == [("n2", 3), ("n1", 2), ("n3", 1)]


@pytest.mark.parametrize(
    "text, problem",
    [
        (None, "cannot be read (No such file or directory)"),
        ("\n\n", "the file names no host"),
        ("n1\nn1 n2\n", "line 2 'n1 n2' holds more than one name"),
    ],
)
def test_a_pbs_node_file_it_cannot_read_is_named(tmp_path, text, problem):
    nodefile = tmp_path / "nodes"
    if text is not None:
        nodefile.write_text(text)
    with pytest.raises(MalformedHosts) as refused:
        read_pbs_nodefile(str(nodefile))
    assert str(refused.value).startswith(
        f"PBS_NODEFILE={str(nodefile)!r}: {problem}; expected a readable file with one host name"
    )


def test_mpi_host_files_of_mpich_and_open_mpi(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(
        "# mpich\nnodea:2\nnodeb  # one slot\n  # open mpi\nnodec slots=4 max_slots=8\n"
    )
    assert read_mpi_hostfile(str(hostfile)) == [("nodea", 2), ("nodeb", 1), ("nodec", 4)]


@pytest.mark.parametrize(
    "line", ["nodea:0", "nodea:x", "nodea:2 slots=3", "nodea 4", "nodea slots=", ":2"]
)
def test_a_host_file_line_it_cannot_read_is_named(tmp_path, line):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"nodez:1\n{line}\n")
    with pytest.raises(
        MalformedHosts,
        match=re.escape(f"--hostfile={str(hostfile)!r}: line 2 {line!r} is not a host"),
    ):
        read_mpi_hostfile(str(hostfile))


def test_the_environment_names_its_source_and_slurm_comes_before_pbs(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("pbs1\npbs1\n")
    assert hosts_from_environment({"HOME": "/root"}) is None
    assert hosts_from_environment({"PBS_NODEFILE": str(nodefile)}) == HostList(
        [("pbs1", 2)], "PBS_NODEFILE"
    )
    both = hosts_from_environment({**SLURM_2X2, "PBS_NODEFILE": str(nodefile)})
    assert both.hosts == [("node01", 2), ("node02", 2)] and both.total_slots == 4
    assert both.describe() == (
        "hosts from SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE: "
        "node01:2,node02:2 (PBS_NODEFILE is set too, not used: "
        "Slurm's list comes first)"
    )
    with pytest.raises(
        MalformedHosts,
        match=re.escape("SLURM_TASKS_PER_NODE (unset): SLURM_JOB_NODELIST='node[01-02]' is set"),
    ):
        hosts_from_environment({"SLURM_JOB_NODELIST": "node[01-02]"})


def dry_run(options: List[str], env: Dict[str, str]) -> subprocess.CompletedProcess:
    """`mxkv-launch --dry-run [options]` in a subprocess, run where the checkout's root is,
    with `env` instead of any scheduler's or mxkv's variables of this process."""
    clean = job_environment()
    return subprocess.run(
        [sys.executable, "-m", "mxkv_hybrid.launch", "--dry-run", *options],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**clean, **env},
    )


@pytest.mark.parametrize("scheduler", ["slurm", "pbs"])
def test_mpiexec_gets_the_schedulers_hosts_and_n_from_their_slots(tmp_path, scheduler):
    if scheduler == "slurm":
        env, source = SLURM_2X2, "SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE"
    else:
        (tmp_path / "nodes").write_text("node01\nnode02\nnode01\nnode02\n")
        env, source = {"PBS_NODEFILE": str(tmp_path / "nodes")}, "PBS_NODEFILE"
    done = dry_run(["--", "python", "x.py"], env)
    assert done.returncode == 0, done.stderr
    assert " -n 4 -prepend-rank -hosts node01:2,node02:2 " in done.stdout, done.stdout
    assert done.stderr == f"mxkv-launch: hosts from {source}: node01:2,node02:2\n"


def test_hosts_given_on_the_command_line_win_over_the_schedulers():
    done = dry_run(["-n", "1", "-H", "nodea:1", "--", "python", "x.py"], SLURM_2X2)
    assert done.returncode == 0, done.stderr
    assert " -hosts nodea:1 " in done.stdout and done.stderr == "", done


def test_a_malformed_scheduler_variable_stops_the_launcher():
    done = dry_run(["--", "python", "x.py"], {**SLURM_2X2, "SLURM_TASKS_PER_NODE": "2(x3)"})
    assert done.returncode == 2 and not done.stdout
    assert (
        "mxkv-launch: error: SLURM_TASKS_PER_NODE='2(x3)': 3 task count(s) for the 2 "
        "node(s) of SLURM_JOB_NODELIST='node[01-02]'" in done.stderr
    ), done.stderr


@dataclass
class SbatchScript:
    """The parts of slurm.sbatch a test runs: its #SBATCH options (without the dashes),
    its exports and its mxkv-launch command's words."""

    options: Dict[str, str]
    exports: Dict[str, str]
    command: List[str]


def read_sbatch_script() -> SbatchScript:
    script = SbatchScript({}, {}, [])
    for line in (CLUSTER / "slurm.sbatch").read_text().splitlines():
        if line.startswith("#SBATCH "):
            script.options.update(
                option.lstrip("-").split("=", 1) for option in shlex.split(line[len("#SBATCH ") :])
            )
        elif line.startswith("export "):
            script.exports.update([line[len("export ") :].split("=", 1)])
        elif line.startswith("mxkv-launch "):
            script.command = shlex.split(line)
    return script


def test_the_slurm_script_runs_one_group_job_per_node():
    script = read_sbatch_script()
    nodes, per_node = int(script.options["nodes"]), int(script.options["ntasks-per-node"])
    assert (nodes, per_node) == (2, 2) and script.exports == {"MXKV_MODE": "easgd"}
    slurm = {
        "SLURM_JOB_NODELIST": f"node[01-{nodes:02d}]",
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{nodes})",
    }
    done = dry_run(script.command[1:], {**slurm, **script.exports})
    assert done.returncode == 0, done.stderr
    assert (
        done.stderr == "mxkv-launch: hosts from SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE: "
        "node01:2,node02:2\n"
    )
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [
        f"MXKV_GROUP_JOB=group={g}:groups=2:first_rank={2 * g}:ranks=4" for g in range(2)
    ]
    for node, line in enumerate(lines, 1):
        assert f" -n 2 -prepend-rank -hosts node{node:02d}:2 " in line, line
        assert line.endswith(" -m mxkv_hybrid.run examples/train_digits.py"), line


def test_the_mpijob_manifest_launches_mxkv_launch_on_its_workers_hosts(tmp_path):
    yaml = pytest.importorskip(
        "yaml",
        reason="PyYAML is not installed: the manifest examples/cluster/mpijob.yaml is not parsed",
    )
    job = yaml.safe_load((CLUSTER / "mpijob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    spec = job["spec"]
    assert (spec["slotsPerWorker"], spec["mpiImplementation"]) == (2, "MPICH")
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"] == ["mxkv-launch"]
    arguments = launcher["args"]
    assert arguments[:2] == ["--hostfile", "/etc/mpi/hostfile"], arguments
    # the host file mpi-operator writes for MPICH: one `host:slots` line per worker pod
    name = job["metadata"]["name"]
    workers = [f"{name}-worker-{i}.{name}.default.svc" for i in range(2)]
    (tmp_path / "hostfile").write_text("".join(f"{worker}:2\n" for worker in workers))
    env = {variable["name"]: variable["value"] for variable in launcher["env"]}
    done = dry_run(["--hostfile", str(tmp_path / "hostfile"), *arguments[2:]], env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    for worker, line in zip(workers, lines):
        assert f" -n 2 -prepend-rank -hosts {worker}:2 " in line, line


def test_an_open_mpi_host_file_reaches_hydra_as_hosts(tmp_path):
    """Hydra's -f refuses `host slots=N` lines: one MPI job gets the file read, as -hosts."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("nodea slots=2\nnodeb slots=2  # a comment\n")
    done = dry_run(["-n", "4", "--hostfile", str(hostfile), "--", "python", "x.py"], {})
    assert done.returncode == 0, done.stderr
    assert "-hosts nodea:2,nodeb:2" in done.stdout and " -f " not in done.stdout, done.stdout


@pytest.mark.emulated_hosts
@pytest.mark.skipif(EMULATION_REASON is not None, reason=f"no emulated hosts: {EMULATION_REASON}")
def test_a_slurm_allocation_of_emulated_hosts_trains_across_them(make_cluster, job_dir, references):
    """h[1-2] with 2(x2) tasks, no -H and no -n: 4 ranks, 2 on each host, the same weights
    as one process; the gradients crossed h2's link."""
    cluster = make_cluster(2)
    job = launch_on(
        cluster,
        "h1",
        [],
        ["train_gluon.py", "--out", str(job_dir / "dist")],
        env={"SLURM_JOB_NODELIST": "h[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"},
    )
    assert job.returncode == 0, job.output
    assert "hosts from SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE: h1:2,h2:2" in job.output
    weights = load_ranks(job_dir / "dist", 4)
    assert_identical_across_ranks(weights)
    assert_matches_reference(weights[0], references.weights("train_gluon.py", "--reference", "4"))
    assert cluster.bytes_sent("h2") > sum(w.nbytes for w in weights[0].values())

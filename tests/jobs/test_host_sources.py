"""The launcher's mpiexec command under each scheduler, from `mxkv-launch --dry-run` as a real
process (launch/host_sources.py): hosts and -n from Slurm's or PBS's variables, -H winning over
them, a malformed variable stopping it, an Open MPI host file passed to Hydra as -hosts, and
the examples in examples/cluster/ (slurm.sbatch, mpijob.yaml)."""

import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List

import pytest

from support.jobs import job_environment
from support.paths import EXAMPLES

ROOT = EXAMPLES.parent


CLUSTER = EXAMPLES / "cluster"


SLURM_2X2 = {"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_TASKS_PER_NODE": "2(x2)"}


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

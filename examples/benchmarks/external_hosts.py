"""Hosts someone else set up, for the benchmarks' `--cluster external`: the same jobs as on
the emulated hosts (emulated_hosts.py), on machines (or namespaces, containers) made and
shaped another way, so that a figure can be checked on hosts this package did not build.

    BENCH_HOSTS=a,b BENCH_SSH=/path/to/ssh-stand-in \\
        python examples/benchmarks/training_step.py --cluster external --hosts 2 --mbps 1000

BENCH_HOSTS names the hosts in order (the first plays h1: it runs the launcher, the
scheduler and the servers); BENCH_SSH is the command that runs a command on a host,
`STAND_IN HOST COMMAND...` as ssh takes it (default `ssh`); Hydra starts the ranks with
it too. Every host needs this checkout and its Python at the same paths, the hosts must
resolve each other's names, and ending the stand-in must end what it started (ssh does
with a terminal, `ssh -tt`). Only the variables a job reads cross to the host (PREFIXES);
MPI is forced over TCP (UCX_TLS=tcp,self), as on the emulated hosts. --mbps is the rate
the hosts' links have: this harness shapes nothing, it only uses the rate for the link
limits it prints."""

import os
import shlex
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence

HOSTS_VARIABLE = "BENCH_HOSTS"
SSH_VARIABLE = "BENCH_SSH"
# what crosses to a host: the package's knobs, MXNet's, ps-lite's, OpenMP's, MPI's
PREFIXES = ("MXKV_", "MXNET_", "DMLC_", "PS_", "OMP_", "UCX_", "HYDRA_", "PYTHONPATH")


class ExternalHosts:
    """The hosts BENCH_HOSTS names, reached through BENCH_SSH: what the
    benchmarks use of an emulated Cluster (names, size, rate_mbit, address, run,
    environment). A context manager that makes and removes nothing."""

    def __init__(self, hosts: int, rate_mbit: Optional[float]) -> None:
        named = [h for h in os.environ.get(HOSTS_VARIABLE, "").split(",") if h]
        if len(named) < hosts:
            raise SystemExit(
                f"--cluster external needs {hosts} hosts in {HOSTS_VARIABLE} (comma-separated, "
                f"the first runs the launcher and the servers), and it names "
                f"{len(named)}: {named}"
            )
        self.ssh = os.environ.get(SSH_VARIABLE, "ssh")
        if shutil.which(shlex.split(self.ssh)[0]) is None:
            raise SystemExit(
                f"--cluster external: {SSH_VARIABLE}={self.ssh!r} is not a command here (set "
                "it to what runs `STAND_IN HOST COMMAND...` on a host, as ssh does)"
            )
        self.names: List[str] = named[:hosts]
        self.size = hosts
        self.rate_mbit = rate_mbit
        self._addresses: Dict[str, str] = {}

    def __enter__(self) -> "ExternalHosts":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def links(self) -> Dict[str, object]:
        """How the hosts' links are made, as a results file records it: not by this run."""
        return {"made_by": f"external ({HOSTS_VARIABLE})", "rate_mbit": self.rate_mbit}

    def address(self, name: str) -> str:
        """Host `name`'s address, as the host itself resolves its name (ps-lite's scheduler
        address must be one)."""
        if name not in self._addresses:
            found = subprocess.run(
                [*shlex.split(self.ssh), name, f"getent hosts {shlex.quote(name)}"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if found.returncode != 0 or not found.stdout.split():
                raise SystemExit(
                    f"--cluster external: host {name} does not resolve its own name "
                    f"(`getent hosts {name}` there: {found.stderr.strip() or 'nothing'})"
                )
            self._addresses[name] = found.stdout.split()[0]
        return self._addresses[name]

    def environment(self) -> Dict[str, str]:
        """What a launcher on one of the hosts needs to start ranks on the others."""
        return {"HYDRA_LAUNCHER": "ssh", "HYDRA_LAUNCHER_EXEC": self.ssh, "UCX_TLS": "tcp,self"}

    def command(self, name: str, argv: Sequence[str], env: Dict[str, str]) -> List[str]:
        """`argv` as run on host `name`, in this directory, with the variables of `env`
        a job reads."""
        crossing = {k: v for k, v in env.items() if k.startswith(PREFIXES)}
        remote = "cd {} && exec env {} {}".format(
            shlex.quote(os.getcwd()),
            " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(crossing.items())),
            shlex.join(argv),
        )
        return [*shlex.split(self.ssh), name, remote]

    def run(
        self, name: str, argv: Sequence[str], env: Optional[Dict[str, str]] = None, **popen
    ) -> subprocess.Popen:
        """Starts `argv` on host `name` with os.environ, environment() and `env` (those a
        job reads); Popen's other arguments pass through."""
        full = dict(os.environ, **self.environment(), **(env or {}))
        return subprocess.Popen(self.command(name, argv, full), **popen)

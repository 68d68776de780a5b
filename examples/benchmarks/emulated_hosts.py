"""Benchmark jobs on emulated hosts (mxkv_hybrid.testing.cluster: network namespaces, one
tbf-shaped link per host that all of its ranks share, MPI over TCP): the real thing the
in-process throttle (MXKV_THROTTLE_MBPS, one link per rank) stands in for. Needs root. Or,
with --cluster external, on hosts someone else set up (external_hosts.py)."""

import argparse
import subprocess
import sys
from typing import Dict, List, Optional, Union

from mxkv_hybrid.testing.cluster import Cluster, unavailable_reason

from external_hosts import HOSTS_VARIABLE, SSH_VARIABLE, ExternalHosts

CLUSTERS = ("emulated", "external")


def require_emulated_hosts() -> None:
    """Exits with the reason when this machine cannot make emulated hosts."""
    reason = unavailable_reason()
    if reason:
        sys.exit(f"--hosts needs emulated hosts, and {reason}")


def add_cluster_option(parser: argparse.ArgumentParser) -> None:
    """--cluster: which hosts --hosts runs on."""
    parser.add_argument(
        "--cluster",
        choices=CLUSTERS,
        default="emulated",
        help="with --hosts: emulated hosts this run makes (root; mxkv_hybrid.testing.cluster) "
        f"or hosts someone else set up, named by {HOSTS_VARIABLE} and reached by "
        f"{SSH_VARIABLE} (external_hosts.py)",
    )


def hosts_of(kind: str, hosts: int, rate_mbit: Optional[float]) -> Union[Cluster, ExternalHosts]:
    """The `hosts` hosts a benchmark runs on, a context manager: emulated ones made here,
    their links shaped to `rate_mbit`, or external ones whose links have that rate."""
    if kind == "external":
        return ExternalHosts(hosts, rate_mbit)
    require_emulated_hosts()
    return Cluster(hosts, rate_mbit)


def launch_on_hosts(
    cluster: Union[Cluster, ExternalHosts],
    ranks_per_host: int,
    command: List[str],
    env: Dict[str, str],
    launcher_options: Optional[List[str]] = None,
    timeout: float = 1800,
) -> subprocess.CompletedProcess:
    """`mxkv-launch -n K*R -H h1:R,...,hK:R [options] -- command` started on the first host."""
    hosts = ",".join(f"{name}:{ranks_per_host}" for name in cluster.names)
    launcher = [
        sys.executable,
        "-m",
        "mxkv_hybrid.launch",
        "-n",
        str(ranks_per_host * cluster.size),
        "-H",
        hosts,
        "--timeout",
        str(timeout),
        *(launcher_options or []),
        "--",
        *command,
    ]
    process = cluster.run(
        cluster.names[0],
        launcher,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate(timeout=timeout + 60)
    return subprocess.CompletedProcess(launcher, process.returncode, stdout, stderr)


def allreduce_limit_seconds(gradient_bytes: int, hosts: int, mbps: float) -> float:
    """The least time an allreduce over `hosts` hosts can take behind links of `mbps`: each
    host must send (and receive) 2 (H-1)/H of the gradient through its own link."""
    return 2 * (hosts - 1) / hosts * gradient_bytes * 8 / (mbps * 1e6)


def servers_limit_seconds(
    gradient_bytes: int, talkers_per_host: int, hosts: int, mbps: float
) -> float:
    """The least time a step through parameter servers on h1 can take behind links of
    `mbps`: h1's link carries, each way, what the `talkers_per_host` processes of each
    other host push (and pull) to h1's servers (a hybrid group's leader: 1; dist_sync:
    every worker); a full-duplex link carries pushes and pulls at once."""
    return (hosts - 1) * talkers_per_host * gradient_bytes * 8 / (mbps * 1e6)

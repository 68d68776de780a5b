"""Runs a native MXNet ps-lite job: one scheduler, S servers, W workers (plain processes, not
MPI ranks), for the benchmarks' `dist_sync` baseline, on 127.0.0.1 or on emulated or
external hosts (the scheduler and servers on the first host, h1, the workers spread over
the hosts in turn, each node announcing its own host's address). The nodes are started
the way mxkv-launch starts them: the scheduler first, the servers once it listens.
"""

import os
import subprocess
import sys
from typing import List

from mxkv_hybrid.launch.processes import Node, end_process_group, free_port, wait_until_listening

HOST = "127.0.0.1"
NODE = [sys.executable, "-m", "mxkv_hybrid.ps.server"]


def run_ps_job(
    worker_command: List[str],
    num_workers: int,
    num_servers: int,
    timeout: float = 900,
    cluster=None,  # a Cluster or ExternalHosts
) -> List[str]:
    """Runs `worker_command` as every worker; returns each worker's stdout (rank order unknown)."""
    first = cluster.names[0] if cluster else "h1"  # the scheduler's and the servers' host
    host = cluster.address(first) if cluster else HOST
    port = free_port(HOST)  # on emulated hosts: h1 is a fresh namespace, every port free
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "MXKV_"))}
    env.update(
        {
            "DMLC_PS_ROOT_URI": host,
            "DMLC_PS_ROOT_PORT": str(port),
            "DMLC_NUM_SERVER": str(num_servers),
            "DMLC_NUM_WORKER": str(num_workers),
            "PS_VERBOSE": "0",
        }
    )
    if cluster is None:
        env["DMLC_NODE_HOST"] = HOST

    def on(name: str, command: List[str], role: str, **popen) -> subprocess.Popen:
        if cluster is None:
            return subprocess.Popen(
                command, env=dict(env, DMLC_ROLE=role), start_new_session=True, **popen
            )
        return cluster.run(
            name, command, env=dict(env, DMLC_ROLE=role), start_new_session=True, **popen
        )

    scheduler = on(first, NODE, "scheduler")
    processes = [scheduler]
    try:
        if cluster is None:  # (ZeroMQ connects again until the scheduler listens)
            wait_until_listening(Node("scheduler", scheduler), host, port, timeout=60)
        processes += [on(first, NODE, "server") for _ in range(num_servers)]
        hosts = cluster.names if cluster else [first]
        workers = [
            on(
                hosts[i * len(hosts) // num_workers],
                worker_command,
                "worker",
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(num_workers)
        ]
        processes += workers
        outputs = [w.communicate(timeout=timeout)[0] for w in workers]
        failed = [w.returncode for w in workers if w.returncode != 0]
        if failed:
            raise RuntimeError(f"dist_sync workers failed with exit status {failed}")
        return outputs
    finally:
        for process in processes:  # the servers leave once the workers are done
            end_process_group(process, grace=30)

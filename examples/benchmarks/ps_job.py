"""Runs a native MXNet ps-lite job on 127.0.0.1: one scheduler, S servers, W workers (plain
processes, not MPI ranks), for the benchmarks' `dist_sync` baseline. The nodes are started
the way mxkv-launch starts them: the scheduler first, the servers once it listens.
"""
import os
import subprocess
import sys
from typing import List

from mxkv_hybrid.launch.processes import end_process_group, free_port, start, wait_until_listening

HOST = "127.0.0.1"
NODE = [sys.executable, "-m", "mxkv_hybrid.ps.server"]


def run_ps_job(worker_command: List[str], num_workers: int, num_servers: int,
               timeout: float = 900) -> List[str]:
    """Runs `worker_command` as every worker; returns each worker's stdout (rank order unknown)."""
    port = free_port(HOST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "MXKV_"))}
    env.update({"DMLC_PS_ROOT_URI": HOST, "DMLC_PS_ROOT_PORT": str(port),
                "DMLC_NUM_SERVER": str(num_servers), "DMLC_NUM_WORKER": str(num_workers),
                "DMLC_NODE_HOST": HOST, "PS_VERBOSE": "0"})
    scheduler = start("scheduler", NODE, dict(env, DMLC_ROLE="scheduler"))
    processes = [scheduler.process]
    try:
        wait_until_listening(scheduler, HOST, port, timeout=60)
        processes += [start(f"server {i}", NODE, dict(env, DMLC_ROLE="server")).process
                      for i in range(num_servers)]
        workers = [subprocess.Popen(worker_command, env=dict(env, DMLC_ROLE="worker"),
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)
                   for _ in range(num_workers)]
        processes += workers
        outputs = [w.communicate(timeout=timeout)[0] for w in workers]
        failed = [w.returncode for w in workers if w.returncode != 0]
        if failed:
            raise RuntimeError(f"dist_sync workers failed with exit status {failed}")
        return outputs
    finally:
        for process in processes:  # the servers leave once the workers are done
            end_process_group(process, grace=30)

"""Runs a native MXNet ps-lite job on 127.0.0.1: one scheduler, S servers, W workers.

Used by the benchmarks as the `dist_sync` baseline. The scheduler starts first and the
servers only once it listens (started together, a server can take the scheduler's port).
"""
import os
import socket
import subprocess
import sys
import time
from typing import Dict, List

SERVER_CODE = "import mxnet"  # DMLC_ROLE=server/scheduler turns `import mxnet` into that node


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_listening(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"the ps-lite scheduler did not listen on port {port} within {timeout} s")


def run_ps_job(worker_command: List[str], num_workers: int, num_servers: int,
               timeout: float = 900) -> List[str]:
    """Runs `worker_command` as every worker; returns each worker's stdout (rank order unknown)."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "MXKV_"))}
    base.update({"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port),
                 "DMLC_NUM_SERVER": str(num_servers), "DMLC_NUM_WORKER": str(num_workers),
                 "PS_VERBOSE": "0"})

    def start(role: str, command: List[str], **kwargs) -> subprocess.Popen:
        env: Dict[str, str] = dict(base, DMLC_ROLE=role)
        return subprocess.Popen(command, env=env, start_new_session=True, **kwargs)

    python = [sys.executable, "-c", SERVER_CODE]
    nodes = [start("scheduler", python)]
    try:
        _wait_until_listening(port, timeout=60)
        nodes += [start("server", python) for _ in range(num_servers)]
        workers = [start("worker", worker_command, stdout=subprocess.PIPE, text=True)
                   for _ in range(num_workers)]
        nodes += workers
        outputs = [w.communicate(timeout=timeout)[0] for w in workers]
        failed = [w.returncode for w in workers if w.returncode != 0]
        if failed:
            raise RuntimeError(f"dist_sync workers failed with exit status {failed}")
        for node in nodes[:1 + num_servers]:
            node.wait(timeout=60)
        return outputs
    finally:
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, 9)
                node.wait()

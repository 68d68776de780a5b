"""The processes mxkv-launch starts: each in its own session, watched, and ended with its
whole process group (a grace period, SIGTERM, then SIGKILL), so nothing is left behind."""

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from .control.reaper import REAPER
from .rank_watch import process_stats

GRACE_SECONDS = 5.0


class Terminated(Exception):
    """SIGTERM/SIGHUP reached the launcher."""


def _raise_terminated(signum, frame):
    raise Terminated(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP raise Terminated in the launcher's main thread."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)


def live_processes() -> Dict[int, int]:
    """{pid: process group} of every running process (zombies excluded), from /proc."""
    return {pid: int(fields[2]) for pid, fields in process_stats().items() if fields[0] != "Z"}


def live_group_members(pgid: int) -> List[int]:
    """PIDs in process group `pgid` that are still running."""
    return [pid for pid, group in live_processes().items() if group == pgid]


def spawn(command: List[str], **popen) -> subprocess.Popen:
    """Starts `command` in a session of its own (Popen's other arguments pass through),
    adopted by the reaper (control/reaper.py): ended should the launcher die."""
    process = subprocess.Popen(command, start_new_session=True, **popen)
    REAPER.adopt(process.pid)
    return process


def end_process_group(
    process: subprocess.Popen, grace: float = 0.0, patience: float = GRACE_SECONDS
) -> None:
    """Gives the process group `grace` seconds to end by itself, then SIGTERM, then
    SIGKILL for whatever outlives `patience` seconds more."""
    deadline = time.monotonic() + grace
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not live_group_members(process.pid):
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + patience
        while live_group_members(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    process.wait()
    REAPER.release(process.pid)


@dataclass
class Node:
    """A process the launcher started (in its own session) and watches."""

    name: str
    process: subprocess.Popen
    leaves_by_itself: bool = True  # a server does once the workers are gone; a relay never
    vital: bool = True  # its end ends the job (not a relay on another host: its ranks say)

    def after_exit(self) -> None:
        """What the launcher does once this node (not vital) has exited: nothing, unless a
        kind of node says otherwise (a relay on a live host is started again)."""


def start(name: str, command: List[str], env: Optional[Dict[str, str]] = None) -> Node:
    return Node(name, spawn(command, env=env))


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until_listening(node: Node, host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.process.poll() is not None:
            raise RuntimeError(
                f"the {node.name} exited with status {node.process.returncode} before listening"
            )
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the {node.name} did not listen on {host}:{port} within {timeout:g} s")

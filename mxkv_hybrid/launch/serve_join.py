"""The two halves of a job whose groups start separately, anywhere (modes sync, async, easgd):

    mxkv-launch --servers 2 --groups 3 --serve                  # once: prints TOKEN@HOST:PORT
    mxkv-launch --join TOKEN@HOST:PORT -n 8 -- python train.py  # on each group's machines

`serve` runs the parameter server and the rendezvous until every group's job is over;
`join_group` runs one group's MPI job with what the rendezvous assigned it.
"""
import os
import sys
import time
from typing import List, Optional

from ..config import read_knob
from .group_jobs import GroupPlan, Restarts, start_group, supervise_groups
from .processes import Node, Terminated, end_process_group, stop_on_signals
from .rendezvous import JoinRefused, Rendezvous, join

# what a joining group's ranks need to reach the servers; never the serving machine's own
# DMLC_NODE_HOST / DMLC_INTERFACE: each host announces its own address (comm/network.py)
SETTINGS = ("DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER",
            "PS_HEARTBEAT_INTERVAL", "PS_HEARTBEAT_TIMEOUT")


def serve(groups: int, mode: str, host: str, servers: List[Node], timeout: Optional[float]) -> int:
    """Waits for `groups` groups to join, then until every group's job is over (or the
    servers die, `timeout` passes, or a signal comes); ends the servers. Returns the exit
    status: 0 when every group finished, 1 otherwise (124 timeout, 130 stopped)."""
    settings = {name: os.environ[name] for name in SETTINGS if os.environ.get(name)}
    rendezvous = Rendezvous(groups, mode, dict(settings, DMLC_ROLE="worker"), host,
                            float(read_knob("MXKV_LOST_SECONDS")))
    print(f"mxkv-launch: serving a job of {groups} group(s) in MXKV_MODE={mode}; start each "
          f"group with\n    MXKV_MODE={mode} mxkv-launch --join {rendezvous.address} -n RANKS "
          "-- python train.py ...", flush=True)
    if not (host.startswith("127.") or host == "localhost"):
        print(f"mxkv-launch: {host} is not loopback: the token only keeps other jobs' "
              "launchers out; ps-lite authenticates nothing, so the scheduler's and the "
              "servers' ports must be reachable only from this job's machines (a firewall, "
              "a private network)", file=sys.stderr, flush=True)
    stop_on_signals()
    deadline = None if timeout is None else time.monotonic() + timeout
    code = None
    try:
        rendezvous.gather()
        while code is None and not rendezvous.wait(time.monotonic() + 1.0):
            dead = [s for s in servers if s.process.poll() not in (None, 0)]
            if dead:
                print(f"mxkv-launch: the {dead[0].name} (pid {dead[0].process.pid}) exited with "
                      f"status {dead[0].process.returncode} while the groups were running",
                      file=sys.stderr, flush=True)
                code = 1
            elif deadline is not None and time.monotonic() > deadline:
                print(f"mxkv-launch: timed out after {timeout:g} s", file=sys.stderr, flush=True)
                code = 124
    except (KeyboardInterrupt, Terminated) as stop:
        print(f"mxkv-launch: {stop.__class__.__name__} {stop}; ending the servers",
              file=sys.stderr, flush=True)
        code = 130
    for server in servers:
        end_process_group(server.process)
    for member in rendezvous.members:
        outcome = ("went away without reporting" if member.gone else
                   "is still running" if member.status is None else
                   f"ended with status {member.status}")
        print(f"mxkv-launch: {member.describe()} {outcome}", flush=True)
    rendezvous.close()
    if code is None:
        code = 0 if all(m.status == 0 for m in rendezvous.members) else 1
    return code


def join_group(address: str, ranks: int, mode: str, command: List[str], flavour: str,
               timeout: Optional[float], restarts: int, wait_seconds: float) -> int:
    """Joins the served job, runs this group's MPI job (restarting it up to `restarts`
    times), and reports how it ended. Returns its exit status (2: refused)."""
    print(f"mxkv-launch: joining the job at {address.rpartition('@')[2]} with {ranks} rank(s); "
          "waiting for the other groups to join", flush=True)
    try:
        joined = join(address, ranks, mode, wait_seconds, float(read_knob("MXKV_LOST_SECONDS")))
    except JoinRefused as refused:
        print(f"mxkv-launch: not joined: {refused}", file=sys.stderr, flush=True)
        return 2
    assigned = joined.assignment
    plan = GroupPlan(assigned["group"], assigned["groups"], assigned["first_rank"], ranks,
                     assigned["ranks"])
    print(f"mxkv-launch: joined as {plan.describe()} of {plan.groups} group(s), "
          f"{plan.ranks} rank(s) in all", flush=True)
    env = dict(os.environ, **assigned["environment"])
    delay = float(env.get("PS_HEARTBEAT_TIMEOUT", 0)) + 2
    code = 1
    try:
        code = supervise_groups([start_group(plan, command, env, flavour)], [], timeout,
                                Restarts(restarts, delay), stop_order=joined.why_stop).code
    finally:
        joined.report(code)
    return code

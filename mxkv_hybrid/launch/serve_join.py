"""The two halves of a job whose groups start separately, anywhere (modes sync, async, easgd):

    mxkv-launch --servers 2 --groups 3 --serve                  # once: prints TOKEN@HOST:PORT
    mxkv-launch --join TOKEN@HOST:PORT -n 8 -- python train.py  # on each group's machines

`serve` runs the parameter server and the rendezvous until every group's job is over;
`join_group` runs one group's MPI job with what the rendezvous assigned it.
"""

import logging
import time
from typing import Callable, Dict, List, Optional

from ..config import read_knob
from ..logs import TO_STDERR
from ..ps.node_addresses import PsNodes
from .control.keeper import JobAddress
from .control.restarts import Restarts
from .group_jobs import GroupPlan, start_group, supervise_groups
from .job_environment import JobEnvironment
from .lost_hosts import LostRanks
from .processes import Node, Terminated, end_process_group, stop_on_signals
from .relay_setup import node_environment
from .rendezvous import JoinedGroup, JoinRefused, Rendezvous, join
from .serve_relays import HostRelay, whole_table
from .supervisor import say, supervise

log = logging.getLogger(__name__)


class ServedGroups:
    """The groups joined to a served job (a Work): over when every group reported or went
    away; a group lost before the groups met is left out, and the others start again on
    fresh servers (`start_servers`, which replace `servers` in place and tell
    `environment`)."""

    running, stopping = "groups", "ending the servers"

    def __init__(
        self,
        rendezvous: Rendezvous,
        servers: List[Node],
        start_servers: Callable[[int], List[Node]],
        environment: JobEnvironment,
    ):
        self.rendezvous, self.servers, self.start_servers = rendezvous, servers, start_servers
        self.environment = environment  # (the servers' settings, for the groups' new places)
        self.left_out: List[str] = []

    def poll(self) -> Optional[int]:
        rendezvous = self.rendezvous
        if rendezvous.left_out:
            self.left_out += [member.describe() for member in rendezvous.left_out]
            for server in self.servers:
                end_process_group(server.process)
            self.servers[:] = self.start_servers(len(rendezvous.members) - len(rendezvous.left_out))
            rendezvous.regroup(self.environment.serving_settings())
            log.info(
                f"mxkv-launch: {rendezvous.groups} group(s) start again: "
                + ", ".join(member.describe() for member in rendezvous.members)
            )
        if not rendezvous.over:
            return None
        return 0 if all(m.row.status == 0 for m in rendezvous.members) and not self.left_out else 1

    def wait(self, seconds: float) -> None:
        self.rendezvous.listen(seconds)


def serve(
    groups: int,
    mode: str,
    host: str,
    start_servers: Callable[[int], List[Node]],
    timeout: Optional[float],
    environment: JobEnvironment,
    relayed: bool = False,
) -> int:
    """Starts the parameter server (`start_servers(groups)`), waits for `groups` groups to
    join, then watches them (ServedGroups, supervisor.supervise) until every group's job
    is over, or the servers die, `timeout` passes, or a signal comes; ends the servers.
    Returns the exit status: 0 when every group finished, 1 otherwise (124 timeout, 130
    stopped). `relayed`: ps-lite behind relays (serve_relays.py), else on `host`."""
    servers = start_servers(groups)
    rendezvous = Rendezvous(
        groups,
        mode,
        environment.serving_settings(),
        host,
        float(read_knob("MXKV_LOST_SECONDS")),
    )
    relay = HostRelay(rendezvous.token, environment.for_helpers()) if relayed else None
    if relay is not None:

        def plan_relays(members: List[JoinedGroup]) -> Dict[str, str]:
            serving = PsNodes.from_json(environment.for_ranks()["MXKV_PS_NODES"])  # now
            relays = [member.relay for member in members]
            missing = [member.group for member, at in zip(members, relays) if at is None]
            if missing:  # (every joining launcher says where its relay listens)
                raise RuntimeError(f"group(s) {missing} joined without their relay's address")
            table = whole_table(serving, [at for at in relays if at is not None])
            servers.append(relay.start(table, 0))  # watched and ended with the servers
            return node_environment(table)

        rendezvous.plan_relays = plan_relays
    print(
        f"mxkv-launch: serving a job of {groups} group(s) in MXKV_MODE={mode}; start each "
        f"group with\n    MXKV_MODE={mode} mxkv-launch --join {rendezvous.address} -n RANKS "
        "-- python train.py ...",
        flush=True,
    )  # --serve's output at every log level
    if relay is not None:
        log.info(
            "mxkv-launch: ps-lite listens on loopback on every host; relays carry it "
            "between this host and each group's over TLS, keyed by the token "
            "(--trusted-network to connect directly)",
            extra=TO_STDERR,
        )
    elif not (host.startswith("127.") or host == "localhost"):
        log.warning(
            f"mxkv-launch: {host} is not loopback and --trusted-network is set: the "
            "token only keeps other jobs' launchers out; ps-lite authenticates nothing, "
            "so the scheduler's and the servers' ports must be reachable only from "
            "this job's machines (a firewall, a private network)"
        )
    deadline = None if timeout is None else time.monotonic() + timeout
    work = ServedGroups(rendezvous, servers, start_servers, environment)
    try:
        stop_on_signals()
        rendezvous.gather()
    except (KeyboardInterrupt, Terminated) as stop:
        say(f"{stop.__class__.__name__} {stop}; {work.stopping}")
        code = 130
    else:
        code = supervise(work, servers, deadline, timeout)
    for server in servers:
        end_process_group(server.process)
    if relay is not None:
        relay.close()
    for member in rendezvous.members:
        outcome = (
            "went away without reporting"
            if member.row.left
            else "is still running"
            if member.row.status is None
            else f"ended with status {member.row.status}"
        )
        log.info(f"mxkv-launch: {member.describe()} {outcome}")
    if work.left_out:
        log.info(f"mxkv-launch: left out before the groups met: {', '.join(work.left_out)}")
    rendezvous.close()
    return code


def join_group(
    address: str,
    ranks: int,
    mode: str,
    command: List[str],
    flavour: str,
    timeout: Optional[float],
    restarts: int,
    wait_seconds: float,
    lost_ranks: LostRanks,
    environment: JobEnvironment,
) -> int:
    """Joins the served job, runs this group's MPI job (restarting it up to `restarts`
    times; started again in its new place when the job regroups without a group lost
    before the groups met), and reports how it ended. `lost_ranks`: the launcher's link
    with the group's ranks. Returns its exit status (2: refused)."""
    log.info(
        f"mxkv-launch: joining the job at {address.rpartition('@')[2]} with {ranks} "
        "rank(s); waiting for the other groups to join"
    )
    try:
        joined = join(
            address,
            ranks,
            mode,
            wait_seconds,
            float(read_knob("MXKV_LOST_SECONDS")),
            lost_ranks.link.met,
            restarts,
            lost_ranks.link.give_up,
        )
    except JoinRefused as refused:
        log.error(f"mxkv-launch: not joined: {refused}")
        return 2
    deadline = None if timeout is None else time.monotonic() + timeout
    assigned = joined.assignment
    remote = lost_ranks.remote_ranks  # numbered from 0 here, from first_rank in the job
    relay = HostRelay(JobAddress.parse(address).token, environment.for_helpers())
    code = 1
    try:
        while True:
            plan = GroupPlan(
                assigned["group"],
                assigned["groups"],
                assigned["first_rank"],
                ranks,
                assigned["ranks"],
            )
            log.info(
                f"mxkv-launch: joined as {plan.describe()} of {plan.groups} group(s), "
                f"{plan.ranks} rank(s) in all"
            )
            env = environment.for_ranks(**assigned["environment"])
            helpers = []
            if "MXKV_PS_NODES" in assigned["environment"]:  # behind relays: this host's
                table = PsNodes.from_json(read_knob("MXKV_PS_NODES", env))
                helpers.append(relay.start(table, table.leaders[plan.group][0]))
            lost_ranks.expect_only({plan.first_rank + rank: host for rank, host in remote.items()})
            lost_ranks.link.forget_meeting()
            lost_ranks.link.forget(list(plan.members))
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            code = supervise_groups(
                [start_group(plan, command, env, flavour)],
                helpers,
                left,
                Restarts.for_job(restarts, env),
                stop_order=joined.why_stop,
                lost_ranks=lost_ranks,
                rejoin=joined.ask_to_rejoin,
            ).code
            again = joined.start_again()
            if again is None:
                break
            assigned = again
    finally:
        relay.close()
        joined.report(code)
    return code

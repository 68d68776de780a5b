"""mxkv-launch: starts the ranks of a training job with this environment's own MPI.

    mxkv-launch -n 4 -- python train.py --kv-store hybrid
    mxkv-launch -n 8 -H host1:4,host2:4 -- python train.py
    MXKV_MODE=sync mxkv-launch -n 4 --group-size 2 --servers 2 -- python train.py

`python script.py` (and `python -m module`) is run as `python -m mxkv_hybrid.run ...`
with this interpreter, so unmodified scripts get the plugin. Every output line is
prefixed with its rank. With --servers, a ps-lite scheduler and S servers are started
first (modes sync, async, easgd); in modes async and easgd each group then runs as its own
MPI job (--one-job: one MPI job for every rank; --group-jobs: the same in mode sync). The
exit status is non-zero when any rank or server fails, and every process is ended on
failure, timeout, Ctrl-C or SIGTERM.
"""

import argparse
import functools
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import replace
from typing import List, Optional, Sequence

from .. import timeline_parts
from ..capabilities import capabilities_of, modes_with, modes_without
from ..config import LOG_LEVELS, knob_is_set, launcher_mode, read_knob, separate_groups_refusal
from ..logs import TO_STDERR, set_level
from ..logs import configure as configure_logs
from ..network import describe_address
from ..ps import scheduler as scheduler_script
from . import serve_relays, shm_leftovers, supervisor, threads
from .control import verdict
from .control.link import LinkServer
from .control.restarts import Restarts
from .control.timing import LINK_CLOSE_SECONDS
from .group_jobs import (
    GroupPlan,
    GroupRun,
    start_group,
    supervise_groups,
    without,
)
from .host_sources import MalformedHosts, hosts_from_environment, read_mpi_hostfile
from .job_environment import JobEnvironment
from .launch_plan import LaunchPlan
from .lost_hosts import LostRanks
from .processes import (
    GRACE_SECONDS,
    Node,
    end_process_group,
    free_port,
    spawn,
    start,
    wait_until_listening,
)
from .ps_address import LOOPBACK, PsHostRefused, choose_ps_host, remote_hosts
from .rank_watch import RankWatch
from .reach_check import ReachCheck, probe_command
from .relay_setup import (
    RelayNode,
    Relays,
    node_environment,
    one_job_leader_hosts,
    plan_nodes,
    relay_crash,
    server_environment,
)
from .serve_join import join_group, serve
from .supervisor import say

log = logging.getLogger(__name__)
CHECK_TIMEOUT = 60.0  # seconds; --check's default --timeout


def find_mpiexec() -> str:
    """The mpiexec that belongs to the MPI mpi4py uses: this environment's, else PATH's."""
    here = os.path.join(sys.prefix, "bin", "mpiexec")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("mpiexec")
    if found is None:
        sys.exit("mxkv-launch: no mpiexec found; install MPI with `pip install mpich`")
    return found


def _flavour(mpiexec: str) -> str:
    text = subprocess.run(
        [mpiexec, "--version"], capture_output=True, check=False, text=True
    ).stdout
    return "openmpi" if "Open MPI" in text or "OpenRTE" in text else "hydra"


def mpi_arguments(flavour: str, plan: LaunchPlan) -> List[str]:
    """Options for mpiexec: process count, hosts and rank-prefixed output."""
    if flavour == "openmpi":
        out = ["-n", str(plan.num_ranks), "--tag-output", "--oversubscribe"]
        out += ["-H", plan.hosts] if plan.hosts else []
        out += ["--hostfile", plan.hostfile] if plan.hostfile else []
    else:  # Hydra's -f takes no Open MPI `slots=N` lines: the host file read, as -hosts
        hosts = plan.hosts or (
            ",".join(f"{host}:{slots}" for host, slots in plan.host_slots())
            if plan.hostfile
            else None
        )
        out = ["-n", str(plan.num_ranks), "-prepend-rank"]
        out += ["-hosts", hosts] if hosts else []
    return out


PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def wrap_command(command: Sequence[str]) -> List[str]:
    """`python [options] x.py ...` -> `<this python> [options] -m mxkv_hybrid.run x.py ...`,
    the same for `-m module`; `python -c ...` -> `<this python> -c ...` (the interpreter
    that has MXNet, whatever PATH finds); other programs are left unchanged."""
    command = list(command)
    if not os.path.basename(command[0]).startswith("python"):
        return command
    position = 1
    while (
        position < len(command) and command[position].startswith("-") and command[position] != "-m"
    ):
        if command[position] == "-c":
            return [sys.executable, *command[1:]]
        position += 2 if command[position] in PYTHON_OPTIONS_WITH_VALUE else 1
    if position >= len(command):
        return [sys.executable, *command[1:]]
    options, target = command[1:position], command[position:]
    if target[:2] == ["-m", "mxkv_hybrid.run"]:
        target = target[2:]
    return [sys.executable, *options, "-m", "mxkv_hybrid.run", *target]


def merge_timeline() -> None:
    """With MXKV_TIMELINE set: the ranks' parts joined into one trace, and a line saying so."""
    path = read_knob("MXKV_TIMELINE")
    recorded = timeline_parts.merge(os.path.abspath(path)) if path else None
    if recorded:
        log.info(f"mxkv-launch: {recorded}", extra=TO_STDERR)


class OneJob:
    """One MPI job of `num_ranks` ranks (a Work): over when mpiexec exits; ended for a lost
    host (`lost_ranks`: one MPI world cannot go on without it), a relay that crashed
    (among `helpers`), a rank whose script failed while the others went on, or one that
    ended before MPI's start held the others."""

    running, stopping = "ranks", "stopping all ranks"

    def __init__(
        self,
        job: Node,
        num_ranks: int,
        lost_ranks: Optional[LostRanks],
        helpers: Sequence[Node] = (),
    ):
        self.job, self.ranks, self.lost_ranks = job, range(num_ranks), lost_ranks
        self.helpers = helpers  # its relays: one that crashed may have lost messages
        self.watch = RankWatch(job.process.pid, num_ranks)
        self.started = time.monotonic()

    def poll(self) -> Optional[int]:
        code = self.job.process.poll()
        if code is not None:
            return code
        crash = relay_crash(self.helpers, self.started)
        if self.lost_ranks is not None:
            found = self.lost_ranks.judge(self.ranks, self.started, True, crash)
        else:  # no link: no member to judge but its relays
            found = verdict.judge_relay(crash)
        if found.alive:
            return None
        consequence = (
            ", and a job that is one MPI world cannot go on without it"
            if found.state is verdict.State.LOST
            else ""
        )
        say(f"{found.sentence}{consequence}; {self.stopping}")
        return found.status

    def wait(self, seconds: float) -> None:
        self.watch.wait(seconds)


def supervise(
    job: Node,
    helpers: List[Node],
    timeout: Optional[float],
    num_ranks: int,
    deadline: Optional[float] = None,
    lost_ranks: Optional[LostRanks] = None,
) -> int:
    """Watches the job (supervisor.supervise); ends everything once it is over (`deadline`,
    a time.monotonic(), ends the --timeout seconds begun before this job) and names the
    first rank to end when it failed. Returns the exit status (124 timeout, 130 stopped)."""
    if deadline is None and timeout is not None:
        deadline = time.monotonic() + timeout
    work = OneJob(job, num_ranks, lost_ranks, helpers)
    code = supervisor.supervise(work, helpers, deadline, timeout)
    # if mpiexec is still running, the launcher ends the job: ranks ending after this are
    # its doing, no news; if it exited by itself, its ranks' links may close just after
    decided = time.monotonic() if job.process.poll() is None else None
    end_process_group(job.process)
    for helper in helpers:  # servers leave by themselves once the workers are gone
        end_process_group(
            helper.process, grace=GRACE_SECONDS if code == 0 and helper.leaves_by_itself else 0
        )
    work.watch.close()
    merge_timeline()
    if code not in (0, 124, 130):
        failed = lost_ranks.first_failed(work.ranks) if lost_ranks is not None else None
        first = None
        if lost_ranks is not None:  # a rank of another host that ended first, by its link
            first = lost_ranks.first_to_end(
                work.ranks,
                before=decided,
                wait=0.0 if decided else LINK_CLOSE_SECONDS,
                elsewhere_than=socket.gethostname(),
            )
        if first is None:  # else this host's own view (its ranks' PIDs, a failed script)
            first = work.watch.describe_first_ended(socket.gethostname(), failed)
        say(
            f"the job failed with exit status {code}"
            + (
                f"; {first} (the PID in mpiexec's report, if it printed one, can be a rank it "
                "stopped itself)"
                if first
                else "; the first rank-prefixed error above names the failing rank"
            )
        )
    return code


def start_parameter_servers(
    plan: LaunchPlan,
    num_groups: int,
    mpiexec: str,
    flavour: str,
    environment: JobEnvironment,
    plans: Optional[List[GroupPlan]] = None,
) -> List[Node]:
    """The scheduler (here, listening on --ps-host) and --servers servers; hands their
    DMLC_* settings to `environment`, for the ranks started after them."""
    servers = {
        "DMLC_NUM_SERVER": str(plan.servers),
        "DMLC_NUM_WORKER": str(num_groups),
        "DMLC_ROLE": "worker",
    }
    relays: List[Node] = []  # started first; listed after the scheduler and servers
    table = None
    if plan.relays_wanted:  # ps-lite on loopback, between hosts through the relays
        leader_hosts = (
            [group.host or plan.scheduler_host for group in plans]
            if plans
            else one_job_leader_hosts(plan.host_slots(), plan.num_ranks, plan.group_size)
        )
        table, names = plan_nodes(
            plan.scheduler_host, leader_hosts, plan.servers, plan.restarts if plans else 0
        )
        servers.update(node_environment(table))
        relays += Relays(table, names, mpiexec, environment.for_helpers()).nodes
        log.info(
            f"mxkv-launch: ps-lite listens on loopback on each of the {len(names)} hosts; "
            f"relays carry it between them over TLS with this job's key (port "
            f"{table.relay_port}; --trusted-network to connect directly)",
            extra=TO_STDERR,
        )
    elif plan.serve and serve_relays.relays_wanted(plan.scheduler_host, plan.trusted_network):
        table = serve_relays.plan_serving_nodes(
            plan.scheduler_host, plan.servers
        )  # the groups' later
        servers.update(node_environment(table))
    else:
        servers.update(
            {
                "DMLC_PS_ROOT_URI": plan.scheduler_host,
                "DMLC_PS_ROOT_PORT": str(free_port(plan.scheduler_host)),
            }
        )
        if plan.ps_interface:
            servers["DMLC_INTERFACE"] = plan.ps_interface
        # otherwise every ps-lite node announces the address its host reaches the scheduler
        # from (network.py, at the package's import): loopback when it runs here
    environment.serve_with(servers)
    node = [sys.executable, "-m", "mxkv_hybrid.ps.server"]
    nodes: List[Node] = []
    try:
        scheduler = start(
            "parameter-server scheduler",
            [sys.executable, scheduler_script.__file__],
            environment.for_ranks(DMLC_ROLE="scheduler"),
        )
        nodes.append(scheduler)
        wait_until_listening(scheduler, *environment.scheduler_address(), timeout=60)
        server_env = environment.for_ranks(DMLC_ROLE="server")
        if plan.server_hosts:
            hosts = (
                ["-hosts", plan.server_hosts] if flavour == "hydra" else ["-H", plan.server_hosts]
            )
            nodes.append(
                start(
                    "parameter servers",
                    [mpiexec, "-n", str(plan.servers), *hosts, *node],
                    server_env,
                )
            )
        else:
            for i in range(plan.servers):
                env = dict(server_env, **(server_environment(table, i) if table else {}))
                nodes.append(start(f"parameter server {i}", node, env))
    except BaseException:
        for n in nodes + relays:
            end_process_group(n.process, grace=0)
        raise
    return nodes + relays


def build_parser() -> argparse.ArgumentParser:
    """mxkv-launch's flags (the docs' flag page is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="mxkv-launch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-n",
        "--num-ranks",
        type=int,
        help="number of ranks (with --join: of this group; default under "
        "Slurm or PBS: every slot of the allocation)",
    )
    parser.add_argument(
        "-H",
        "--hosts",
        help="host1:slots,host2:slots (passed to mpiexec); "
        "without it or --hostfile, the hosts of the "
        "Slurm (SLURM_JOB_NODELIST) or PBS "
        "(PBS_NODEFILE) job this runs in",
    )
    parser.add_argument("--hostfile", help="MPI host file: host, host:slots or host slots=N lines")
    parser.add_argument("--timeout", type=float, help="stop every rank after this many seconds")
    ps = parser.add_argument_group("parameter server (MXKV_MODE=sync, async or easgd)")
    ps.add_argument(
        "--servers", type=int, default=0, help="start a ps-lite scheduler and this many servers"
    )
    ps.add_argument(
        "--group-size",
        type=int,
        default=0,
        help="ranks per group, in every mode (sets MXKV_GROUP_SIZE; default: one group per host)",
    )
    ps.add_argument(
        "--ps-host",
        help="address of this machine that the ranks and servers reach the "
        "scheduler at (DMLC_PS_ROOT_URI; default: 127.0.0.1 when every "
        "rank and server runs here, else the address the route towards the "
        "other hosts leaves from; a loopback one with other hosts is refused)",
    )
    ps.add_argument("--ps-interface", help="network interface ps-lite uses (DMLC_INTERFACE)")
    ps.add_argument(
        "--trusted-network",
        action="store_true",
        help="with ranks on other hosts, or --serve on an address other than "
        "loopback: let ps-lite listen on the hosts' addresses and connect "
        "directly, without the relays that otherwise carry its connections "
        "between hosts over TLS with the job's key (ps-lite "
        "authenticates nothing and ends on a malformed message: only for "
        "networks that nothing but the job's machines can reach)",
    )
    layout = ps.add_mutually_exclusive_group()
    layout.add_argument(
        "--group-jobs",
        action="store_true",
        help="start each group (--group-size ranks, or without it one group per "
        "-H/--hostfile host) as its own MPI job, joined to the others only "
        "through the parameter server: a group whose rank dies ends alone "
        "and (async, easgd) the others train on. The default in modes "
        "async and easgd (asynchronous) when there is more than one group; "
        "in mode sync on request",
    )
    layout.add_argument(
        "--one-job",
        action="store_true",
        help="modes async and easgd: start every rank in one MPI job instead "
        "(metrics and broadcasts combined over all ranks; one dead rank "
        "ends the job; --restarts restarts the whole job)",
    )
    parser.add_argument(
        "--restarts",
        type=int,
        default=0,
        help="start a failed job again up to this many times (MXKV_ATTEMPT "
        "counts them; a script that calls mxkv_hybrid.checkpoint."
        "load_latest resumes from its last checkpoint); with --group-jobs "
        "or --join only the lost group's job, which rejoins the servers' "
        "model (default 0)",
    )
    ps.add_argument(
        "--serve",
        action="store_true",
        help="modes sync, async and easgd: start the parameter server for --groups "
        "groups that join from anywhere, print the address they join at "
        "(TOKEN@HOST:PORT) and wait until every group's job is over",
    )
    ps.add_argument("--groups", type=int, default=0, help="with --serve: how many groups join")
    ps.add_argument(
        "--join",
        metavar="TOKEN@HOST:PORT",
        help="run this machine's -n ranks as one group of the job that "
        "mxkv-launch --serve started there (--restarts and --check apply: "
        "--check reports on this group and the servers)",
    )
    ps.add_argument(
        "--server-hosts",
        help="host1,host2: start the servers there through mpiexec (default: on this machine)",
    )
    parser.add_argument(
        "--auto",
        action="store_true",
        help="for scripts with no kvstore flag: the default stores become "
        "'hybrid', shuffled training data is sharded by rank and the "
        "script's --gpus LIST becomes the rank's share "
        "(sets MXKV_AUTO=1; see docs/guides/drop-in.md)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="run a self-test of the installation and the topology on the ranks "
        "(and servers) instead of a program, and print a report",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the mpiexec command only")
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help="which messages of the launcher and the ranks are shown (sets "
        "MXKV_LOG_LEVEL for every rank; default: info)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- program [args...]")
    parser.set_defaults(group_jobs_by_default=False)
    return parser


def parse_arguments(argv: Optional[List[str]] = None) -> LaunchPlan:
    """The command line, validated, as a LaunchPlan (or parser.error names what is wrong)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_level:  # before the first message (the ranks': job_environment.py)
        set_level(args.log_level)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if args.check and args.command:
        parser.error("--check runs its own program: drop the command after it")
    if args.check:
        args.command = [sys.executable, "-m", "mxkv_hybrid.self_check"]
        args.timeout = args.timeout or CHECK_TIMEOUT
    try:  # without -H/--hostfile, the batch scheduler's hosts (and slots as -n by default)
        scheduled = (
            None
            if args.hosts or args.hostfile or args.serve
            else hosts_from_environment(os.environ)
        )
        if args.hostfile:
            read_mpi_hostfile(args.hostfile)  # one it cannot read is refused before anything
    except MalformedHosts as malformed:
        parser.error(str(malformed))
    if scheduled:
        args.hosts = scheduled.as_hosts_option()
        if args.num_ranks is None:
            args.num_ranks = scheduled.total_slots
        log.info(f"mxkv-launch: {scheduled.describe()}", extra=TO_STDERR)
    return validate(parser, LaunchPlan.from_arguments(args))


def validate(parser: argparse.ArgumentParser, plan: LaunchPlan) -> LaunchPlan:
    """`plan` checked against the mode (MXKV_MODE) and itself, with what it leaves to the
    launcher filled in (group jobs by default, the scheduler's address)."""
    mode = launcher_mode()
    can = capabilities_of(mode)
    if plan.serve:
        check_serve(parser, plan, mode)
        return replace(plan, ps_host=place_scheduler(parser, plan))
    if not plan.command:
        parser.error("no command given: mxkv-launch -n 2 -- python train.py")
    if plan.num_ranks < 1:
        parser.error("-n (the number of ranks) must be given and at least 1")
    if plan.restarts < 0:
        parser.error("--restarts must not be negative")
    if plan.join:
        check_join(parser, plan, mode)
        return plan
    if plan.servers < 0 or plan.group_size < 0:
        parser.error("--servers and --group-size must not be negative")
    remote_centre = can.rma_transport and read_knob("MXKV_TRANSPORT") == "rma"
    if remote_centre and (plan.servers or plan.server_hosts or plan.group_jobs):
        parser.error(
            "MXKV_TRANSPORT=rma keeps easgd's centre variable in MPI windows of the "
            "group leaders, in one MPI job: drop --servers, --server-hosts and "
            "--group-jobs (--group-size sets the groups)"
        )
    groups_without_servers = remote_centre or not can.servers
    if (
        plan.server_hosts or plan.group_jobs or (plan.group_size and not groups_without_servers)
    ) and not plan.servers:
        parser.error(
            f"--group-size, --server-hosts and --group-jobs need --servers in "
            f"MXKV_MODE={mode} (--group-size without servers: modes "
            f"{_spoken(modes_without('servers'))}, and "
            f"{_spoken(modes_with('rma_transport'))} with MXKV_TRANSPORT=rma)"
        )
    if plan.groups:
        parser.error("--groups declares the groups of --serve")
    if plan.one_job and not can.group_jobs_by_default:
        parser.error(
            "--one-job chooses one MPI job in the modes "
            f"{', '.join(modes_with('group_jobs_by_default'))}, "
            f"whose groups run as separate jobs by default, and MXKV_MODE is {mode}, "
            "which runs as one MPI job anyway: drop --one-job"
        )
    if plan.group_jobs:
        check_group_jobs(parser, plan, mode)
    elif plan.servers and groups_apart_by_default(plan, mode):
        plan = replace(plan, group_jobs=True, group_jobs_by_default=True)
    elif plan.servers and not plan.dry_run:
        say_why_one_job(plan, mode)
    if plan.servers and not can.servers:
        unset = "" if knob_is_set("MXKV_MODE") else " (unset)"
        parser.error(
            f"--servers serves the modes {_spoken(modes_with('servers'))}, and MXKV_MODE "
            f"is {mode}{unset}, which uses no parameter server: set MXKV_MODE or drop "
            "--servers"
        )
    if plan.servers and not plan.dry_run:  # a dry run starts no scheduler
        plan = replace(plan, ps_host=place_scheduler(parser, plan))
    served_behind_relays = (
        plan.serve
        and plan.ps_host
        and serve_relays.relays_wanted(plan.ps_host, plan.trusted_network)
    )
    if plan.servers and plan.server_hosts and (plan.relays_wanted or served_behind_relays):
        parser.error(
            "--server-hosts with ranks on other hosts: the relays that carry ps-lite "
            "between hosts do not place servers on other hosts yet; start the "
            "servers here (drop --server-hosts) or add --trusted-network"
        )
    return plan


def _spoken(names: Sequence[str]) -> str:
    """('a', 'b', 'c') -> 'a, b and c'."""
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def place_scheduler(parser: argparse.ArgumentParser, plan: LaunchPlan) -> str:
    """The scheduler's address (ps_address.choose_ps_host), or refuses the job before
    anything starts."""
    hosts = [host for host, _ in plan.host_slots()] if plan.hosts or plan.hostfile else []
    hosts += [host for host in (plan.server_hosts or "").split(",") if host]
    try:
        chosen = choose_ps_host(plan.ps_host, hosts)
    except PsHostRefused as refused:
        parser.error(str(refused))
    if plan.ps_host is None and chosen != LOOPBACK:
        entry = (
            "this host's relay (ps-lite's way in from the other hosts; ps-lite itself "
            "listens on loopback)"
            if plan.relays_wanted
            else "the parameter-server scheduler"
        )
        log.info(
            f"mxkv-launch: {entry} listens on {describe_address(chosen)}, where the route "
            "towards the other hosts leaves this machine (--ps-host to choose another)",
            extra=TO_STDERR,
        )
    return chosen


def check_sync_restarts(
    parser: argparse.ArgumentParser, plan: LaunchPlan, mode: str, option: str
) -> None:
    """A lost sync group cannot rejoin: the others stop when it is lost."""
    if capabilities_of(mode).groups_step_together and plan.restarts:
        parser.error(
            f"in MXKV_MODE={mode} the servers wait for every group's gradients at every "
            f"step, so the other groups stop when one is lost and a restarted group "
            f"would have nobody to rejoin: drop {option} and restart the whole job "
            "from its checkpoint (--restarts with checkpoint.load_latest)"
        )


def check_separable_mode(parser: argparse.ArgumentParser, mode: str, option: str) -> None:
    """Refuses `option` (each group its own MPI job) where config's rule refuses it."""
    refusal = separate_groups_refusal(
        mode, read_knob("MXKV_EASGD_SYNC"), read_knob("MXKV_TRANSPORT")
    )
    if refusal:
        parser.error(f"{option} runs each group as its own MPI job, and {refusal}: drop {option}")


def check_serve(parser: argparse.ArgumentParser, plan: LaunchPlan, mode: str) -> None:
    check_separable_mode(parser, mode, "--serve")
    if not plan.servers or plan.groups < 1:
        parser.error("--serve needs --servers S and --groups G (how many groups will join)")
    if (
        plan.command
        or plan.join
        or plan.group_jobs
        or plan.one_job
        or plan.group_size
        or plan.check
    ):
        parser.error(
            "--serve runs the parameter server only: start the groups with "
            "mxkv-launch --join on their machines"
        )


def check_join(parser: argparse.ArgumentParser, plan: LaunchPlan, mode: str) -> None:
    check_separable_mode(parser, mode, "--join")
    if plan.servers or plan.group_size or plan.group_jobs or plan.one_job or plan.groups:
        parser.error(
            "--join runs one group of a served job (-n is its size): drop --servers, "
            "--group-size, --group-jobs, --one-job and --groups"
        )
    check_sync_restarts(parser, plan, mode, "--join")


def groups_apart_by_default(plan: LaunchPlan, mode: str) -> bool:
    """Whether the groups run as separate MPI jobs without --group-jobs: in the modes whose
    groups can live and die alone (async, asynchronous easgd), unless --one-job, when the
    ranks form more than one group that can be planned (--group-size, or -H/--hostfile
    whose slots add up to -n: one group per host; not both)."""
    if (
        plan.one_job
        or not capabilities_of(mode).group_jobs_by_default
        or separate_groups_refusal(mode, read_knob("MXKV_EASGD_SYNC"), read_knob("MXKV_TRANSPORT"))
    ):
        return False
    if bool(plan.group_size) == bool(plan.hosts or plan.hostfile):
        return False
    if not plan.group_size and sum(slots for _, slots in plan.host_slots()) != plan.num_ranks:
        return False
    return len(plan.group_plans()) > 1


def say_why_one_job(plan: LaunchPlan, mode: str) -> None:
    """A line when hosts are named but the groups of a mode that runs them apart by default
    share one MPI job (so a lost host ends every group): never chosen silently."""
    if (
        plan.one_job
        or not capabilities_of(mode).group_jobs_by_default
        or not (plan.hosts or plan.hostfile)
        or separate_groups_refusal(mode, read_knob("MXKV_EASGD_SYNC"), read_knob("MXKV_TRANSPORT"))
    ):
        return
    slots = sum(slots for _, slots in plan.host_slots())
    why = (
        "both --group-size and the hosts are given"
        if plan.group_size
        else f"the hosts' slots add up to {slots}, not -n {plan.num_ranks}"
    )
    log.warning(
        f"mxkv-launch: MXKV_MODE={mode}: one MPI job of all {plan.num_ranks} ranks, as "
        f"{why} (one group job per host needs the hosts alone, their slots adding up to "
        "-n): a lost host ends every group; --one-job to choose this without this line"
    )


def check_group_jobs(parser: argparse.ArgumentParser, plan: LaunchPlan, mode: str) -> None:
    """--group-jobs: the modes joined through the parameter server, groups by size."""
    check_separable_mode(parser, mode, "--group-jobs")
    check_sync_restarts(parser, plan, mode, "--group-jobs")
    if bool(plan.group_size) == bool(plan.hosts or plan.hostfile):
        parser.error(
            "--group-jobs needs --group-size (groups of that many ranks) or -H / "
            "--hostfile (one group per host, its slots its ranks), one of them"
        )
    if not plan.group_size and sum(slots for _, slots in plan.host_slots()) != plan.num_ranks:
        parser.error(
            f"--group-jobs with -H/--hostfile: the hosts' slots must add up to -n "
            f"{plan.num_ranks}, one group per host"
        )


def start_group_jobs(
    plan: LaunchPlan,
    mpiexec: str,
    flavour: str,
    environment: JobEnvironment,
    plans: Optional[List[GroupPlan]] = None,
) -> List[GroupRun]:
    """One MPI job per group of `plans` (default: plan_group_jobs), or, with --dry-run,
    their commands."""
    runs = []
    for group in plans or plan.group_plans():
        sized = replace(
            plan,
            num_ranks=group.size,
            hostfile=None,
            hosts=f"{group.host}:{group.size}" if group.host else None,
        )
        command = [mpiexec, *mpi_arguments(flavour, sized), *wrap_command(plan.command)]
        if plan.dry_run:
            print(f"MXKV_GROUP_JOB={group.knob} {' '.join(command)}")
        else:
            runs.append(start_group(group, command, environment.for_ranks(), flavour))
    return runs


def main(argv: Optional[List[str]] = None) -> None:
    configure_logs(is_rank=False)
    plan = parse_arguments(argv)
    segments_before = shm_leftovers.segments()
    try:
        launch(plan)
    finally:  # a failed job's ranks, killed, leave MPICH's shared memory behind
        shm_leftovers.remove_left(segments_before)


def launch(plan: LaunchPlan) -> None:
    """Runs what the arguments ask for; exits with the job's status."""
    mpiexec = find_mpiexec()
    flavour = _flavour(mpiexec)
    mode = launcher_mode()
    environment = JobEnvironment.of_plan(plan)
    if plan.serve:
        sys.exit(
            serve(
                plan.groups,
                mode,
                plan.scheduler_host,
                lambda groups: start_servers_or_exit(plan, mpiexec, flavour, environment, groups),
                plan.timeout,
                environment,
                serve_relays.relays_wanted(plan.scheduler_host, plan.trusted_network),
            )
        )
    if (
        plan.check
        and not plan.dry_run
        and not check_reachability(plan, mpiexec, flavour, environment)
    ):
        sys.exit(1)
    if plan.auto:
        log.info(
            "mxkv-launch --auto: MXKV_AUTO=1 for every rank: stores 'local'/'device' -> "
            "'hybrid', shuffled ImageRecordIter/DataLoader sharded by rank, --gpus LIST -> "
            "the rank's share"
        )
    command = [mpiexec, *mpi_arguments(flavour, plan), *wrap_command(plan.command)]
    if plan.dry_run:
        if plan.group_jobs:
            start_group_jobs(plan, mpiexec, flavour, environment)
        else:
            print(" ".join(command))
        return
    if threads.VARIABLE not in os.environ:
        log.info(threads.describe(plan))
    if plan.join:
        lost_ranks = open_link(plan, environment)
        code = join_group(
            plan.join,
            plan.num_ranks,
            mode,
            command,
            flavour,
            plan.timeout,
            plan.restarts,
            read_knob("MXKV_PS_TIMEOUT"),
            lost_ranks,
            environment,
        )
        lost_ranks.link.close()
        sys.exit(code)
    if plan.group_jobs:
        if plan.group_jobs_by_default:
            log.info(
                f"mxkv-launch: MXKV_MODE={mode}: each of the {len(plan.group_plans())} "
                "groups runs as its own MPI job, joined to the others through the parameter "
                "server (--one-job: one MPI job)",
                extra=TO_STDERR,
            )
        lost_ranks = open_link(plan, environment)
        code = run_group_jobs(plan, mpiexec, flavour, mode, environment, lost_ranks)
        lost_ranks.link.close()
        merge_timeline()
        sys.exit(code)
    lost_ranks = open_link(plan, environment)
    restarts = Restarts.for_job(plan.restarts, environment.for_ranks())
    code = run_with_restarts(plan, command, mpiexec, flavour, restarts, environment, lost_ranks)
    lost_ranks.link.close()
    sys.exit(code)


def run_group_jobs(
    plan: LaunchPlan,
    mpiexec: str,
    flavour: str,
    mode: str,
    environment: JobEnvironment,
    lost_ranks: LostRanks,
) -> int:
    """The servers and one MPI job per group until they are over; a group lost before the
    groups met at the servers is left out, and the others are started again without it
    (with fresh servers: ps-lite cannot lower its count of workers). Returns the exit
    status."""
    plans = plan.group_plans()
    restarts = Restarts.for_job(plan.restarts, environment.for_ranks())
    deadline = None if plan.timeout is None else time.monotonic() + plan.timeout
    left_out: List[str] = []
    while True:
        helpers = start_servers_or_exit(plan, mpiexec, flavour, environment, len(plans), plans)
        lost_ranks.link.forget_meeting()
        lost_ranks.link.forget(list(range(plan.num_ranks)))
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ended = supervise_groups(
            start_group_jobs(plan, mpiexec, flavour, environment, plans),
            helpers,
            left,
            restarts,
            together=capabilities_of(mode).groups_step_together,
            lost_ranks=lost_ranks,
            met=lost_ranks.link.met,
            ready=functools.partial(ready_host_of, helpers=helpers),
        )
        if not ended.left_out:
            if left_out:
                say(f"left out before the groups met: {', '.join(left_out)}")
            return ended.code or (1 if left_out else 0)
        left_out += [group.describe_where() for group in ended.left_out]
        plans = without(plans, ended.left_out)
        lost_ranks.expect_only({rank: group.host for group in plans for rank in group.members})
        say(
            f"starting {len(plans)} group(s) of {plans[0].ranks} rank(s) again: "
            + ", ".join(group.describe_where() for group in plans)
        )


def ready_host_of(group: GroupPlan, deadline: float, helpers: List[Node]) -> Optional[str]:
    """Before a group starts again: blocks until its host's relay answers (started again
    where it is not running: one cut off from the job has ended itself), or until
    `deadline`. Returns None when the host is ready (or has no relay), else why not."""
    for node in helpers:
        if isinstance(node, RelayNode) and node.host_name == group.host and not node.vital:
            assert node.owner is not None
            return node.owner.wait_until_answering(node, deadline)
    return None


def check_reachability(
    plan: LaunchPlan, mpiexec: str, flavour: str, environment: JobEnvironment
) -> bool:
    """--check on several hosts: whether every host (-H / --hostfile, --server-hosts)
    reaches this machine and every other one, before any MPI job (reach_check); says so."""
    hosts = list(
        dict.fromkeys(
            [host for host, _ in plan.host_slots()] if plan.hosts or plan.hostfile else []
        )
    )
    hosts += [host for host in (plan.server_hosts or "").split(",") if host and host not in hosts]
    try:
        if not remote_hosts(hosts):
            return True
        check = ReachCheck(plan.ps_host or choose_ps_host(None, hosts), hosts)
    except PsHostRefused as refused:
        sys.exit(f"mxkv-launch: {refused}")
    placed = replace(
        plan, num_ranks=len(hosts), hosts=",".join(f"{h}:1" for h in hosts), hostfile=None
    )
    probes = spawn(
        [mpiexec, *mpi_arguments(flavour, placed), *probe_command(check)],
        env=environment.for_helpers(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        check.run()
    finally:
        end_process_group(probes, grace=0)
    problems = check.problems()
    for line in problems or [
        (
            f"all {len(hosts)} hosts reach this machine at "
            f"{check.address.rpartition('@')[2]} and each other"
        )
    ]:
        print(
            f"mxkv-launch --check: reachability (TCP, before MPI): {line}",
            file=sys.stderr,
            flush=True,
        )
    output = probes.communicate()[0].strip()
    if check.missing() and output:
        print(
            "mxkv-launch --check: what the probes' mpiexec printed:\n" + output,
            file=sys.stderr,
            flush=True,
        )
    return not problems


def open_link(plan: LaunchPlan, environment: JobEnvironment) -> LostRanks:
    """The launcher's link with every rank (MXKV_LAUNCHER_LINK), on the address every
    host reaches this machine at, and the ranks expected to call it from other hosts."""
    entries = plan.host_slots() if plan.hosts or plan.hostfile else []
    try:
        address = plan.ps_host or choose_ps_host(None, [host for host, _ in entries])
        remote = set(remote_hosts([host for host, _ in entries]))
    except PsHostRefused as refused:
        sys.exit(f"mxkv-launch: {refused}")
    link = LinkServer(address)
    environment.listen_at(link.address)
    placed = [host for host, slots in entries for _ in range(slots)]
    runs_the_plugin = any("mxkv_hybrid" in part for part in wrap_command(plan.command))
    expected = (
        {rank: placed[rank % len(placed)] for rank in range(plan.num_ranks)}
        if placed and runs_the_plugin
        else {}
    )
    return LostRanks(
        link,
        float(read_knob("MXKV_LOST_SECONDS")),
        {rank: host for rank, host in expected.items() if host in remote},
    )


def start_servers_or_exit(
    plan: LaunchPlan,
    mpiexec: str,
    flavour: str,
    environment: JobEnvironment,
    groups: Optional[int] = None,
    plans: Optional[List[GroupPlan]] = None,
) -> List[Node]:
    """The parameter-server processes of --servers (none without it), for `groups` groups
    (default: as the ranks are grouped in one MPI job)."""
    if not plan.servers:
        return []
    try:
        return start_parameter_servers(
            plan, groups or plan.count_groups(), mpiexec, flavour, environment, plans
        )
    except RuntimeError as err:
        sys.exit(f"mxkv-launch: could not start the parameter server: {err}")


def run_with_restarts(
    plan: LaunchPlan,
    command: List[str],
    mpiexec: str,
    flavour: str,
    restarts: Restarts,
    environment: JobEnvironment,
    lost_ranks: Optional[LostRanks] = None,
) -> int:
    """Runs the job (and its parameter servers), and while `restarts` allows starts a failed
    job again with fresh servers, MXKV_ATTEMPT counting the starts; --timeout bounds them all."""
    deadline = None if plan.timeout is None else time.monotonic() + plan.timeout
    attempt = 0
    while True:
        helpers = start_servers_or_exit(plan, mpiexec, flavour, environment)
        if lost_ranks is not None:
            lost_ranks.link.forget(list(range(plan.num_ranks)))
        job = start("MPI job", command, environment.for_ranks(MXKV_ATTEMPT=str(attempt)))
        code = supervise(job, helpers, plan.timeout, plan.num_ranks, deadline, lost_ranks)
        if code in (0, 124, 130) or not restarts.allows(attempt):
            return code
        attempt += 1
        log.warning(
            f"mxkv-launch: starting the job again ({restarts.describe(attempt)}, "
            f"MXKV_ATTEMPT={attempt}); a script that calls "
            "mxkv_hybrid.checkpoint.load_latest goes on from its last checkpoint"
        )

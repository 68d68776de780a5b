"""Every group as its own MPI job (the default of modes async and easgd, `--group-jobs` in
mode sync), joined to the others only through the parameter server, so a group that dies
ends only its own job while the other groups train on (async, easgd; in sync they cannot).

Group g of G holds the ranks g*S .. min((g+1)*S, N) - 1 (S = --group-size). Its job gets
MXKV_GROUP_JOB (which group, which of all ranks) and its lines are printed with those
ranks' numbers, as one job would print them. The launcher names each lost group and the
first of its ranks to end, and exits non-zero when any group was lost.
"""

import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import BinaryIO, Callable, Dict, List, Optional, Tuple

from .control.members import Member
from .control.restarts import OneRejoin, Restarts
from .control.timing import LINK_CLOSE_SECONDS
from .control.verdict import ALIVE, State, Verdict, judge_relay
from .lost_hosts import LostRanks
from .processes import GRACE_SECONDS, Node, end_process_group, spawn
from .rank_watch import RankWatch, wait_for_any
from .relay_setup import relay_crash
from .supervisor import OUTPUT_LOCK, say, supervise

LOST_STATUS = 1  # a group job ended because its host was lost (the same on every host)
CUT_OFF_PATIENCE_SECONDS = 1.0  # SIGTERM to SIGKILL for the mpiexec of a group cut off


@dataclass(frozen=True)
class GroupPlan:
    """One group's MPI job: group `group` of `groups`, `size` ranks from `first_rank` on,
    of `ranks` in all."""

    group: int
    groups: int
    first_rank: int
    size: int
    ranks: int
    host: Optional[str] = None  # where its ranks run (None: where mpiexec puts them)
    shares_host: bool = False  # every group job runs on this host (local ranks follow ranks)

    @property
    def knob(self) -> str:
        """The value of MXKV_GROUP_JOB for this job's ranks."""
        knob = (
            f"group={self.group}:groups={self.groups}:first_rank={self.first_rank}:"
            f"ranks={self.ranks}"
        )
        if self.shares_host:
            knob += f":local_first={self.first_rank}:local_ranks={self.ranks}"
        return knob

    @property
    def members(self) -> range:
        """Its ranks' numbers in the whole job."""
        return range(self.first_rank, self.first_rank + self.size)

    def describe(self) -> str:
        last = self.first_rank + self.size - 1
        ranks = f"rank {last}" if self.size == 1 else f"ranks {self.first_rank}-{last}"
        return f"group {self.group} ({ranks})"

    def describe_where(self) -> str:
        """describe(), with the host when the group has one: 'group 2 (ranks 4-5) on h3'."""
        return self.describe() + (f" on {self.host}" if self.host else "")


def plan_groups(num_ranks: int, group_size: int) -> List[GroupPlan]:
    """Groups of `group_size` consecutive ranks (the last may be smaller), all on this host."""
    firsts = range(0, num_ranks, group_size)
    return [
        GroupPlan(
            g, len(firsts), first, min(group_size, num_ranks - first), num_ranks, shares_host=True
        )
        for g, first in enumerate(firsts)
    ]


def plan_groups_by_host(hosts: List[Tuple[str, int]]) -> List[GroupPlan]:
    """One group per (host, slots) entry, holding that many consecutive ranks there."""
    firsts = [sum(slots for _, slots in hosts[:g]) for g in range(len(hosts))]
    total = sum(slots for _, slots in hosts)
    return [
        GroupPlan(g, len(hosts), first, slots, total, host)
        for g, (first, (host, slots)) in enumerate(zip(firsts, hosts))
    ]


def renumbering(flavour: str, offset: int) -> Callable[[bytes], bytes]:
    """A line's rank prefix, as mpiexec writes it (Hydra: '[r] ', Open MPI: '[job,r]<'),
    with `offset` added to the rank."""
    if flavour == "openmpi":
        pattern = re.compile(rb"^\[(\d+),(\d+)\]<")
        return lambda line: pattern.sub(
            lambda m: b"[%s,%d]<" % (m.group(1), int(m.group(2)) + offset), line, count=1
        )
    pattern = re.compile(rb"^\[(\d+)\] ")
    return lambda line: pattern.sub(lambda m: b"[%d] " % (int(m.group(1)) + offset), line, count=1)


def _relay(
    source: BinaryIO,
    target: BinaryIO,
    rewrite: Callable[[bytes], bytes],
    lock: threading.Lock,
    muted: threading.Event,
) -> None:
    for line in iter(source.readline, b""):
        if muted.is_set():
            continue
        with lock:
            target.write(rewrite(line))
            target.flush()
    source.close()


@dataclass
class GroupRun:
    """A started group job: its mpiexec, the threads that print its lines, its ranks' watch,
    and what starts it again (a lost group that is restarted gets a new GroupRun)."""

    plan: GroupPlan
    command: List[str]
    env: Dict[str, str]
    flavour: str
    attempt: int
    process: subprocess.Popen
    relays: List[threading.Thread]
    watch: RankWatch
    muted: threading.Event  # set: its output is dropped (a job the launcher ends on purpose)
    code: Optional[int] = None
    restart_at: Optional[float] = None  # lost, to be started again at this time
    started: float = field(default_factory=time.monotonic)
    cut_off: bool = False  # ended because the launcher's link lost its host
    readiness: Optional["HostReadiness"] = None  # its host, readied for its restart

    @property
    def over(self) -> bool:
        return self.code is not None and self.restart_at is None

    def release(self) -> None:
        """Closes the watch and waits for the relays (after the process ended)."""
        self.watch.close()
        for relay in self.relays:
            relay.join()


def start_group(
    plan: GroupPlan,
    command: List[str],
    env: Dict[str, str],
    flavour: str,
    attempt: int = 0,
    rejoin: bool = False,
) -> GroupRun:
    """Starts one group's MPI job (in its own session) and the relays of its output;
    `rejoin`: a restart whose leader rejoins the servers' model (MXKV_REJOIN)."""
    process = spawn(
        command,
        env=dict(
            env,
            MXKV_GROUP_JOB=plan.knob,
            MXKV_ATTEMPT=str(attempt),
            MXKV_REJOIN="1" if rejoin else "0",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    rewrite = renumbering(flavour, plan.first_rank)
    muted = threading.Event()
    relays = [
        threading.Thread(
            target=_relay, args=(source, target, rewrite, OUTPUT_LOCK, muted), daemon=True
        )
        for source, target in (
            (process.stdout, sys.stdout.buffer),
            (process.stderr, sys.stderr.buffer),
        )
    ]
    for relay in relays:
        relay.start()
    return GroupRun(
        plan,
        command,
        env,
        flavour,
        attempt,
        process,
        relays,
        RankWatch(process.pid, plan.size, plan.first_rank),
        muted,
    )


class HostReadiness:
    """A thread that waits until a lost group's host can take its restart (`ready(plan,
    deadline)` returns None, or why not): started when the restart is scheduled, so the
    launcher's loop never blocks on a host that is cut off.

    `answered_at` is when the host was found ready. A host that was stopped or cut off
    may have run the lost group's processes until then (a stopped rank wakes, beats
    ps-lite's scheduler once, and only then hears that it is ended), and ps-lite gives a
    new node a dead one's place only after the dead one's heartbeats have been missed: so
    a restart comes no sooner than Restarts.delay after `answered_at`, as after the loss."""

    def __init__(
        self, plan: GroupPlan, ready: Callable[[GroupPlan, float], Optional[str]], deadline: float
    ):
        self.done = threading.Event()
        self.why_not: Optional[str] = None
        self.answered_at = float("inf")
        self._thread = threading.Thread(
            target=self._wait, args=(plan, ready, deadline), daemon=True
        )
        self._thread.start()

    def _wait(
        self, plan: GroupPlan, ready: Callable[[GroupPlan, float], Optional[str]], deadline: float
    ) -> None:
        try:
            self.why_not = ready(plan, deadline)
            self.answered_at = time.monotonic()
        finally:
            self.done.set()


def _lost(
    run: GroupRun,
    restarts: Restarts,
    others_running: bool,
    ready: Callable[[GroupPlan, float], Optional[str]],
    ended_first: Optional[str],
    found: Verdict = ALIVE,
    failed: Optional[Member] = None,
    no_restart: Optional[str] = None,
) -> None:
    """Reports a lost group (`found`: the verdict that ended its MPI job, if one did, else
    its job exited by itself; `failed`: its first rank whose script reported a failure;
    `ended_first`: its rank that ended first, as the link tells) and, while restarts are
    left and nothing rules one out (`no_restart`: why not), schedules its restart and
    starts readying its host for it."""
    if not found.alive:
        why = f"{found.sentence}, and the launcher ends its MPI job"
    else:
        first = run.watch.describe_first_ended(socket.gethostname(), failed) or ended_first
        why = f"its MPI job exited with status {run.code}" + (f"; {first}" if first else "")
    verb = "failed" if found.state is State.FAILED else "was lost"
    line = f"{run.plan.describe_where()} {verb}: {why}"
    if restarts.allows(run.attempt) and no_restart is None:
        run.restart_at = time.monotonic() + restarts.delay
        run.readiness = HostReadiness(run.plan, ready, run.restart_at + restarts.host_wait)
        line += f"; restarting it in {restarts.delay:g} s ({restarts.describe(run.attempt + 1)})"
    elif restarts.allows(run.attempt):
        line += f"; not restarted: {no_restart}"
    if run.restart_at is None and others_running:
        line += "; the other groups go on"
    say(line)


def _restart(run: GroupRun, met: bool) -> GroupRun:
    """`run`'s group started again: it rejoins the servers' model once the groups `met`
    there, else it starts as the first time (the others still wait for it at the start)."""
    run.release()
    again = start_group(run.plan, run.command, run.env, run.flavour, run.attempt + 1, met)
    say(
        f"{run.plan.describe()} restarted (restart {again.attempt}): "
        + ("it rejoins the servers' model" if met else "it starts with the others")
    )
    return again


@dataclass(frozen=True)
class GroupsEnded:
    """How supervise_groups ended: the exit status, or the groups lost before the groups
    met at the parameter server (to start the others again without them)."""

    code: int
    left_out: List[GroupPlan] = field(default_factory=list)


def without(plans: List[GroupPlan], left_out: List[GroupPlan]) -> List[GroupPlan]:
    """`plans` less `left_out`, numbered again: groups 0.., their ranks from 0 on."""
    kept = [plan for plan in plans if plan not in left_out]
    firsts = [sum(plan.size for plan in kept[:g]) for g in range(len(kept))]
    total = sum(plan.size for plan in kept)
    return [
        replace(plan, group=g, groups=len(kept), first_rank=first, ranks=total)
        for g, (plan, first) in enumerate(zip(kept, firsts))
    ]


def _left_out(run: GroupRun, found: Verdict) -> None:
    """Reports a group whose host was lost (`found`: how) before the groups met."""
    say(
        f"{run.plan.describe_where()} was lost before the groups met at the parameter "
        f"server: {found.sentence}. ps-lite holds every group at its "
        "start until all have registered, so the others go on without it: they start again, "
        "with fresh servers, as a job of one group less (no restart for it)"
    )


class GroupJobs:
    """The group jobs (a Work): each failed group ends alone and is started again while
    `restarts` allows; `together` (mode sync, where the servers wait for every group's
    gradients) ends the others when a group is lost. A group whose host is lost before the
    groups `met` at the parameter server (and not `together`) ends every job, to start
    the others again without it (`left_out`); one that failed then ends them all. A
    `stop_order` (the reason a serving launcher gave) ends every group; `ready` readies
    a group's host before it is started again (its host's relay answers), or says why it
    could not by the deadline given (the group is then given up). A group whose host's
    relay crashed (`helpers`: the relays among them) is ended and restarted too. A group
    lost after the groups met rejoins the servers' model only if `rejoin` (asked with its
    name) grants it: ps-lite's scheduler takes one rejoin (OneRejoin)."""

    running, stopping = "groups", "stopping every group"

    def __init__(
        self,
        runs: List[GroupRun],
        restarts: Restarts,
        together: bool,
        stop_order: Callable[[], Optional[str]],
        lost_ranks: Optional[LostRanks],
        met: Callable[[], bool],
        ready: Callable[[GroupPlan, float], Optional[str]],
        helpers: List[Node],
        rejoin: Callable[[str], Optional[str]],
    ):
        self.runs, self.restarts, self.together = runs, restarts, together
        self.ready, self.helpers = ready, helpers
        self.stop_order, self.lost_ranks, self.met = stop_order, lost_ranks, met
        self.rejoin = rejoin
        self.left_out: List[GroupPlan] = []

    def poll(self) -> Optional[int]:
        for index, run in enumerate(self.runs):
            if run.restart_at is not None and time.monotonic() >= run.restart_at:
                assert run.readiness is not None
                if not run.readiness.done.is_set():
                    continue  # its host is not back yet
                if run.readiness.why_not is None:
                    if time.monotonic() < run.readiness.answered_at + self.restarts.delay:
                        continue  # (its host came back late: see HostReadiness)
                    self.runs[index] = _restart(run, self.met())
                elif self._give_up(run, run.readiness.why_not):
                    return 1
            elif run.code is None:
                code = self._check(run)
                if code is not None:
                    self.left_out = []  # the others cannot go on either way
                    return code
        if self.left_out:
            return 1
        if all(run.over for run in self.runs):
            return 1 if any(run.code not in (None, 0) for run in self.runs) else 0
        ordered = self.stop_order()
        if ordered:
            say(f"{ordered}: stopping {'this group' if len(self.runs) == 1 else 'every group'}")
            return 1
        return None

    def _check(self, run: GroupRun) -> Optional[int]:
        """Looks at one running group: lost (reported, restarted or left out), or not.
        Returns 1 when the other groups cannot go on, else None."""
        run.code = run.process.poll()
        found = self._judge(run) if run.code is None else ALIVE
        if found.state is State.LOST:
            run.code, run.cut_off = LOST_STATUS, True
        elif not found.alive:
            run.code = found.status
        if run.code in (None, 0):
            return None
        try:
            return self._report(run, found)
        finally:  # said first: the mpiexec of a cut-off group waits for its host in vain
            if not found.alive:
                patience = CUT_OFF_PATIENCE_SECONDS if run.cut_off else GRACE_SECONDS
                end_process_group(run.process, patience=patience)
            if self.lost_ranks is not None:  # once it ended: a restarted job starts afresh
                self.lost_ranks.link.forget(list(run.plan.members))

    def _report(self, run: GroupRun, found: Verdict) -> Optional[int]:
        """Reports a group that ended or is being ended (`found`: why, if the launcher ends
        it), and restarts it or leaves it out. Returns 1 when the others cannot go on."""
        lost_ranks = self.lost_ranks
        first_failed = lost_ranks.first_failed(run.plan.members) if lost_ranks is not None else None
        # (on another host: its link tells which rank ended first)
        ended_first = (
            lost_ranks.first_to_end(run.plan.members, wait=LINK_CLOSE_SECONDS)
            if lost_ranks is not None and found.alive
            else None
        )
        before_meeting = len(self.runs) > 1 and not self.met()
        if found.state is State.LOST and before_meeting and not self.together:
            _left_out(run, found)
            self.left_out.append(run.plan)
            return None
        rejoins = self.met()  # (a restart before the groups met registers as at the start)
        restarts = self.restarts.allows(run.attempt)  # (only then is the grant asked, spent)
        _lost(
            run,
            self.restarts,
            any(r.code is None for r in self.runs) and not self.together and not before_meeting,
            self.ready,
            ended_first,
            found,
            first_failed,
            self.rejoin(run.plan.describe()) if rejoins and restarts else None,
        )
        if run.restart_at is None and lost_ranks is not None:
            lost_ranks.link.give_up(run.plan.group)
        if run.restart_at is None and (self.together or before_meeting):
            why = (
                "in MXKV_MODE=sync the servers wait for every group's gradients"
                if self.together
                else "it was lost before the groups met at the parameter "
                "server, whose start waits for all"
            )
            say(f"{why}, so the other groups cannot go on: stopping them")
            return 1
        return None

    def _judge(self, run: GroupRun) -> Verdict:
        """The verdict on a running group (its ranks; its host's relay, if it crashed)."""
        crash = None
        if run.plan.host is not None:  # (else its ranks run where mpiexec put them)
            crash = relay_crash(self.helpers, run.started, run.plan.host)
        if self.lost_ranks is None:
            return judge_relay(crash)
        return self.lost_ranks.judge(run.plan.members, run.started, False, crash)

    def _give_up(self, run: GroupRun, why: str) -> bool:
        """A lost group whose host did not come back for its restart: given up. Returns
        whether the other groups must stop too (sync)."""
        run.restart_at = None
        others = any(r.code is None for r in self.runs) and not self.together
        say(
            f"{run.plan.describe_where()} is not restarted: its host did not come back within "
            f"{self.restarts.host_wait:g} s (MXKV_HOST_RETURN_SECONDS): {why}"
            + ("; the other groups go on" if others else "")
        )
        if self.lost_ranks is not None:
            self.lost_ranks.link.give_up(run.plan.group)
        if self.together:
            say("in MXKV_MODE=sync the servers wait for every group's gradients: stopping them")
            return True
        return False

    def wait(self, seconds: float) -> None:
        wait_for_any([run.watch for run in self.runs if run.code is None], seconds)


def supervise_groups(
    runs: List[GroupRun],
    helpers: List[Node],
    timeout: Optional[float],
    restarts: Restarts,
    together: bool = False,
    stop_order: Callable[[], Optional[str]] = lambda: None,
    lost_ranks: Optional[LostRanks] = None,
    met: Callable[[], bool] = lambda: True,
    ready: Callable[[GroupPlan, float], Optional[str]] = lambda plan, deadline: None,
    rejoin: Optional[Callable[[str], Optional[str]]] = None,
) -> GroupsEnded:
    """Watches the group jobs (GroupJobs, supervisor.supervise) until every one is over, or
    a timeout, a dead parameter-server process, a signal or a stop order ends them all;
    ends what is left. The exit status: 0 when every group finished (restarted or not), 1
    when a group was lost for good or stopped by order, 124 timeout, 130 stopped; or the
    groups lost before the groups met (GroupsEnded.left_out: to start the others again
    without them). `rejoin`: who grants a rejoin (default: this launcher, which started
    the scheduler)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    rejoin = rejoin or OneRejoin().ask
    work = GroupJobs(runs, restarts, together, stop_order, lost_ranks, met, ready, helpers, rejoin)
    code = supervise(work, helpers, deadline, timeout)
    left_out = bool(work.left_out) and code == 1
    for run in runs:
        if left_out:
            run.muted.set()  # mpiexec's banner about the ranks ended here says nothing new
        end_process_group(run.process)
    # the relay of a host cut off ends itself (it watches this host's relay); its mpiexec
    # here would wait for that host in vain before it ends (seen: 5 s, then SIGKILL)
    cut_hosts = {run.plan.host for run in runs if run.cut_off}
    for helper in helpers:  # servers of separate group jobs are never told to stop
        cut = getattr(helper, "host_name", None) in cut_hosts
        end_process_group(helper.process, patience=0 if cut else GRACE_SECONDS)
    for run in runs:
        run.release()
    if left_out:
        return GroupsEnded(1, work.left_out)
    lost = [run.plan.describe() for run in runs if run.code not in (None, 0)]
    restarted = [
        f"{run.plan.describe()} ({run.attempt} restart(s))"
        for run in runs
        if run.attempt and run.code == 0
    ]
    if restarted:
        say(f"restarted and finished: {', '.join(restarted)}")
    if lost:
        say(f"{len(lost)} of {len(runs)} groups lost: {', '.join(lost)}")
    return GroupsEnded(code)

"""The fault matrix: one table of (fault, launch path, mode, moment) cells, each with the
outcome a user sees and the launcher's exit status. tests/hosts/test_fault_matrix.py runs every
cell on emulated hosts (the CI sample by default, the whole table with
`pytest -m fault_matrix`); docs/reference/fault-matrix.md renders the same table.

A cell's job: 3 emulated hosts of 2 ranks each (1000 Mbit/s links), the digits example,
`--restarts 1`, the package's default MXKV_LOST_SECONDS and MXKV_HOST_RETURN_SECONDS as
below; the fault hits host h2 (group 1, ranks 2-3) at the cell's moment."""

import os
import signal
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from mxkv_hybrid.config import KNOBS
from mxkv_hybrid.testing.cluster import Cluster
from mxkv_hybrid.testing.faults import cut_link, kill_a_rank, pause_host, pids, send

LOST_SECONDS = float(KNOBS["MXKV_LOST_SECONDS"].default)  # the default bound is what is tested
HOST_RETURN_SECONDS = 20  # MXKV_HOST_RETURN_SECONDS (30 by default): past cut-heal's heal, sooner
TARGET = "h2"  # the host every fault hits
GROUP = r"group 1 \(ranks 2-3\)"  # the group it holds, as the launcher names it
SHORT_PAUSE = 3.0  # seconds: a pause the job must ride out (a long GC, a swap storm)
LONG_PAUSE = LOST_SECONDS + 8.0  # past the bound
HEAL_AFTER = 20.0  # a cut link heals after this long
EPOCHS = 30  # of the digits example, in every cell
# a moment that comes later in the job trains longer: another group's restart comes first
EPOCHS_AT = {"after another group rejoined": 90}


@dataclass
class Target:
    """What a fault may hit: the cluster, the launcher's process on h1 (with --serve, the
    serving launcher's) and, with --join, the launcher of h2's joined group."""

    cluster: Cluster
    launcher_pid: int
    joined_launcher_pid: Optional[int] = None


def kill_one_rank(target: Target) -> None:
    """kill -9 of one training rank on h2 (its group's second rank)."""
    kill_a_rank(target.cluster, TARGET)


def kill_the_host(target: Target) -> None:
    """kill -9 of every process on h2: its ranks, their keepers, Hydra's proxy, its relay."""
    send(pids(target.cluster, TARGET), signal.SIGKILL)


def pause_the_host(seconds: float) -> Callable[[Target], None]:
    def pause(target: Target) -> None:
        pause_host(target.cluster, TARGET, seconds)

    pause.__doc__ = f"SIGSTOP of every process on h2, SIGCONT {seconds:g} s later"
    return pause


def cut_the_link(heal_after: Optional[float]) -> Callable[[Target], None]:
    def cut(target: Target) -> None:
        cut_link(target.cluster, TARGET, heal_after)

    return cut


def kill_the_relay(target: Target) -> None:
    """kill -9 of h2's relay, the host and its ranks staying up."""
    relays = pids(target.cluster, TARGET, "mxkv_hybrid.launch.relay")
    assert relays, f"no relay runs on {TARGET}"
    send(relays, signal.SIGKILL)


def kill_a_server(target: Target) -> None:
    """kill -9 of the parameter server (on h1, with the launcher)."""
    servers = pids(target.cluster, "h1", "mxkv_hybrid.ps.server")
    assert servers, "no parameter server runs on h1"
    send(servers[:1], signal.SIGKILL)


def kill_the_launcher(target: Target) -> None:
    """kill -9 of mxkv-launch itself: its ranks' keepers end them, wherever they run."""
    os.kill(target.launcher_pid, signal.SIGKILL)


def kill_the_joined_launcher(target: Target) -> None:
    """kill -9 of the launcher that joined h2's group to the served job."""
    assert target.joined_launcher_pid is not None, "no joined group on this path"
    os.kill(target.joined_launcher_pid, signal.SIGKILL)


FAULTS: Dict[str, Tuple[str, Callable[[Target], None]]] = {
    "kill-rank": ("kill -9 of one rank", kill_one_rank),
    "kill-host": ("kill -9 of every process of one host", kill_the_host),
    "pause-short": (f"SIGSTOP of a host for {SHORT_PAUSE:g} s", pause_the_host(SHORT_PAUSE)),
    "pause-long": (
        f"SIGSTOP of a host for {LONG_PAUSE:g} s (past the bound)",
        pause_the_host(LONG_PAUSE),
    ),
    "cut-heal": (f"link cut, healed {HEAL_AFTER:g} s later", cut_the_link(HEAL_AFTER)),
    "cut": ("link cut for good", cut_the_link(None)),
    "kill-relay": ("a relay killed on a live host", kill_the_relay),
    "kill-server": ("a parameter-server process killed", kill_a_server),
    "kill-launcher": ("the launcher killed (kill -9)", kill_the_launcher),
    "kill-joined-launcher": ("a joined launcher killed (kill -9)", kill_the_joined_launcher),
}

PATHS: Dict[str, Tuple[str, List[str]]] = {
    "relays": ("-H group jobs, relays on", []),
    "trusted": ("-H group jobs, --trusted-network", ["--trusted-network"]),
    "one-job": ("-H, one MPI job, relays on", ["--one-job"]),  # (--one-job where needed)
    # --serve on h1 and a group --join-ed from each host (tests/hosts/test_fault_matrix.py)
    "serve-join": ("--serve, a group --join-ed from each host, relays on", []),
}


@dataclass(frozen=True)
class Cell:
    """One case: `fault` (FAULTS) on `path` (PATHS) in `mode` at `moment`; the user sees
    `outcome`, the lines `named` (regular expressions), none of the lines `absent`, and the
    exit status `status`."""

    fault: str
    path: str
    mode: str
    moment: str
    outcome: str
    status: int
    named: Tuple[str, ...]
    ci: bool = False  # in the sample CI runs
    absent: Tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.fault}-{self.path}-{self.mode}-{self.moment}"


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds:g} s"
        time.sleep(0.05)


LOST = rf"{GROUP} on {TARGET} was lost: "
JOINED_FROM_H2 = r"group 1 \(2 rank\(s\), joined from 198\.18\.\d+\.12\)"  # (h2's address)
RESTARTED = (
    rf"{GROUP} restarted \(restart 1\)",
    rf"restarted and finished: {GROUP} \(1 restart\(s\)\)",
)
# a group lost before the groups met, started again as on its first start (MXKV_REJOIN=0)
STARTS_WITH_THE_OTHERS = (
    rf"{GROUP} restarted \(restart 1\): it starts with the others",
    *RESTARTED,
)
KILLED = (
    rf"{LOST}its MPI job exited with status \d+; rank \d on {TARGET} ended first .*restarting it",
    *RESTARTED,
)
SILENT = (
    rf"{LOST}rank \d on {TARGET} .* was last heard from \d+ s ago .*restarting it in",
    *RESTARTED,
)
RELAY_STARTED_AGAIN = (
    rf"the relay on {TARGET} exited with status -?\d+; starting it again",
    rf"the relay on {TARGET} started again",
)
NOTHING_LOST = (r"was lost", r"restarted", r"starting it again")
GIVEN_UP = (
    rf"{LOST}rank \d on {TARGET} .* was last heard from",
    rf"{GROUP} on {TARGET} is not restarted: its host did not come back within \d+ s",
    rf"1 of 3 groups lost: {GROUP}",
)
REJOINS = "the group restarts and rejoins"
JOB_RESTARTS = (
    rf"the job failed with exit status \d+; rank \d on {TARGET} ended first",
    r"starting the job again \(restart 1 of 1",
)

CELLS: List[Cell] = [
    Cell("kill-rank", "relays", "easgd", "mid-training", REJOINS, 0, KILLED, ci=True),
    Cell("kill-rank", "trusted", "easgd", "mid-training", REJOINS, 0, KILLED, ci=True),
    Cell("kill-rank", "relays", "async", "mid-training", REJOINS, 0, KILLED),
    Cell(
        "kill-rank",
        "relays",
        "easgd",
        "while ranks start",
        "the group restarts and starts with the others",
        0,
        (rf"{LOST}its MPI job exited with status \d+.*restarting it", *STARTS_WITH_THE_OTHERS),
        ci=True,
    ),
    *(
        Cell(
            "kill-rank",
            "one-job",
            mode,
            "mid-training",
            "the job restarts",
            0,
            JOB_RESTARTS,
            ci=mode == "allreduce",
        )
        for mode in ("allreduce", "sync", "easgd", "lasgd")
    ),
    Cell(
        "cut",
        "one-job",
        "allreduce",
        "mid-training",
        "the job ends naming the host; its restart fails while the host is cut",
        255,
        (rf"rank \d on {TARGET} .* was last heard from \d+ s ago .*cannot go on without it",),
    ),
    Cell(
        "kill-server",
        "one-job",
        "sync",
        "mid-training",
        "the job restarts with fresh servers",
        0,
        (
            r"the parameter server 0 \(pid \d+\) exited with status -9 while the ranks were",
            r"starting the job again \(restart 1 of 1",
        ),
    ),
    Cell(
        "kill-host",
        "relays",
        "easgd",
        "mid-training",
        "the group and its host's relay restart; the group rejoins",
        0,
        (  # named by whichever the launcher sees first: the group's job or the relay
            rf"{LOST}(its MPI job exited|the relay on {TARGET} exited).*restarting it",
            *RESTARTED,
            *RELAY_STARTED_AGAIN,
        ),
        ci=True,
    ),
    Cell(
        "pause-short",
        "relays",
        "easgd",
        "mid-training",
        "the job continues: nothing is named",
        0,
        (),
        ci=True,
        absent=NOTHING_LOST,
    ),
    Cell("pause-long", "relays", "easgd", "mid-training", REJOINS, 0, SILENT, ci=True),
    Cell(
        "cut-heal",
        "relays",
        "easgd",
        "mid-training",
        "the group restarts once its host answers, and rejoins",
        0,
        SILENT,
        ci=True,
    ),
    Cell(
        "cut",
        "relays",
        "easgd",
        "mid-training",
        "the group is given up once its host has not answered for the bound; the others finish",
        1,
        GIVEN_UP,
        ci=True,
    ),
    Cell(
        "kill-relay",
        "relays",
        "easgd",
        "mid-training",
        "the relay is started again, the host's group restarts and rejoins",
        0,
        (
            *RELAY_STARTED_AGAIN,
            rf"{LOST}the relay on {TARGET} exited with status -?\d+, and ps-lite's messages",
            *RESTARTED,
        ),
        ci=True,
    ),
    Cell(
        "kill-relay",
        "one-job",
        "easgd",
        "mid-training",
        "the relay is started again, the job restarts",
        0,
        (
            *RELAY_STARTED_AGAIN,
            rf"the relay on {TARGET} exited with status -?\d+, and ps-lite's messages",
            r"starting the job again \(restart 1 of 1",
        ),
    ),
    Cell(
        "kill-server",
        "relays",
        "easgd",
        "mid-training",
        "the job ends naming the server",
        1,
        (r"the parameter server 0 \(pid \d+\) exited with status -9 while the groups were",),
        ci=True,
    ),
    Cell(
        "kill-rank",
        "serve-join",
        "easgd",
        "mid-training",
        REJOINS,
        0,
        (
            (
                r"group 1 \(ranks 2-3\) was lost: its MPI job exited with status \d+; rank \d "
                rf"\(pid \d+ on {TARGET}\) was the first rank to end; restarting it"
            ),
            *RESTARTED,
        ),
    ),
    Cell(
        "pause-short",
        "serve-join",
        "easgd",
        "mid-training",
        "the job continues: nothing is named",
        0,
        (),
        absent=NOTHING_LOST,
    ),
    Cell(
        "cut",
        "serve-join",
        "easgd",
        "mid-training",
        "the serving launcher names the group lost, its launcher stops it; the others finish",
        1,
        (
            (
                rf"{JOINED_FROM_H2} was last heard from \d+ s ago \(MXKV_LOST_SECONDS=[\d.]+\): "
                "its host is cut off or dead"
            ),
            r"the serving launcher at [\d.:]+ was last heard from \d+ s ago .*stopping this group",
        ),
    ),
    Cell(
        "kill-joined-launcher",
        "serve-join",
        "easgd",
        "mid-training",
        "the group's ranks end with their launcher; the others finish",
        1,
        (rf"{JOINED_FROM_H2} went away without reporting",),
        ci=True,
    ),
    Cell(
        "kill-host",
        "relays",
        "easgd",
        "before the groups meet",
        "the group and its host's relay restart; the group starts with the others",
        0,
        (
            # its job's exit (with, when a rank's link closed before it was seen, which
            # rank) or its host's relay's, whichever the launcher sees first: the host's
            # processes die together
            (
                rf"{LOST}(its MPI job exited with status \d+"
                rf"(; rank \d on {TARGET} ended first .*)?|the relay on {TARGET} exited with "
                r"status \d+, .*the launcher ends its MPI job); restarting it"
            ),
            *STARTS_WITH_THE_OTHERS,
            *RELAY_STARTED_AGAIN,
        ),
        ci=True,
    ),
    Cell("kill-rank", "relays", "easgd", "at the finish line", REJOINS, 0, KILLED, ci=True),
    Cell(
        "kill-host",
        "relays",
        "easgd",
        "during a restart",
        "the group, out of restarts, is given up; the others finish",
        1,
        (
            rf"{LOST}its MPI job exited with status \d+; the other groups go on",
            rf"1 of 3 groups lost: {GROUP}",
        ),
        ci=True,
    ),
    Cell(
        "kill-rank",
        "relays",
        "easgd",
        "after another group rejoined",
        "the group is not restarted: ps-lite's scheduler takes one rejoining node in its "
        "life (a second aborts it); the others finish",
        1,
        (
            (
                rf"{LOST}its MPI job exited with status \d+.*; not restarted: group 2 \(ranks "
                r"4-5\) rejoined the servers once already, and ps-lite's scheduler takes one "
                r"rejoining node in its life .*; the other groups go on"
            ),
            rf"1 of 3 groups lost: {GROUP}",
        ),
        ci=True,
        absent=(r"scheduler \(pid \d+\) exited with status",),
    ),
    Cell(
        "kill-rank",
        "serve-join",
        "easgd",
        "after another group rejoined",
        "the serving launcher grants the one rejoin to the first group that asks: the "
        "second is not restarted; the others finish",
        1,
        (
            (
                r"group 1 \(ranks 2-3\) was lost: its MPI job exited with status \d+.*; not "
                r"restarted: group 2 \(2 rank\(s\), joined from [\d.]+\) rejoined the servers "
                r"once already, and ps-lite's scheduler takes one rejoining node in its life"
            ),
        ),
        absent=(r"scheduler \(pid \d+\) exited with status",),
    ),
    Cell(
        "kill-launcher",
        "relays",
        "easgd",
        "mid-training",
        "every process on every host ends (the launcher's reaper, the ranks' keepers)",
        -9,
        (),
        ci=True,
    ),
]


# when the fault strikes: each waits for its moment in the job's output or on the hosts
def _mid_training(job, cluster) -> None:
    job.wait_for(rf"^\[0\] epoch  3/{EPOCHS}", seconds=120)


def _while_ranks_start(job, cluster) -> None:
    wait_until(lambda: pids(cluster, TARGET, "mxkv_hybrid.run"), 60, f"a rank on {TARGET}")


def _before_the_groups_meet(job, cluster) -> None:
    """h2's ranks run and their keepers called (mxkv_hybrid imported: MXNet's import and
    ps-lite's start, where the groups meet, take seconds more)."""
    wait_until(lambda: len(pids(cluster, TARGET, "keeper_process")) >= 2, 60, "h2's keepers")


def _at_the_finish_line(job, cluster) -> None:
    """Rank 0 (h1's group) has trained its last epoch: the groups are finishing."""
    job.wait_for(rf"^\[0\] epoch {EPOCHS}/{EPOCHS}", seconds=120)


def _during_a_restart(job, cluster) -> None:
    """h2's ranks killed mid-training (both at once: a survivor may print its failed
    collective's traceback), and their group's restart under way: the group was named
    lost and its new ranks run on h2."""
    _mid_training(job, cluster)
    before = set(pids(cluster, TARGET, "mxkv_hybrid.run"))
    send(sorted(before), signal.SIGKILL)
    job.wait_for(rf"{GROUP} on {TARGET} was lost: .*restarting it", seconds=60)
    wait_until(lambda: set(pids(cluster, TARGET, "mxkv_hybrid.run")) - before, 60, "h2's new ranks")


def _after_another_group_rejoined(job, cluster) -> None:
    """A rank of h3 killed mid-training, and its group (2, ranks 4-5) back in the job: its
    leader rejoined the servers' model, ps-lite's scheduler taking it as a recovering node."""
    job.wait_for(r"^\[0\] epoch  3/", seconds=120)
    kill_a_rank(cluster, "h3")
    job.wait_for(r"group 2 \(ranks 4-5\) restarted \(restart 1\): it rejoins", seconds=60)
    job.wait_for(r"^\[4\] mxkv_hybrid: group 2 rejoins \(restart 1\)", seconds=60)


MOMENTS: Dict[str, Callable[[object, object], None]] = {
    "mid-training": _mid_training,
    "while ranks start": _while_ranks_start,
    "before the groups meet": _before_the_groups_meet,
    "at the finish line": _at_the_finish_line,
    "during a restart": _during_a_restart,
    "after another group rejoined": _after_another_group_rejoined,
}

"""Where separately started groups meet: `mxkv-launch --serve` and `mxkv-launch --join`.

The serving launcher starts the parameter server and listens on a control port. A group's
launcher (`--join TOKEN@HOST:PORT -n N`) connects, presents the job's token, its mode and
how many ranks it brings. Once all G declared groups are there, each is told its group
number, its ranks' numbers in the whole job and the ps-lite settings to reach the
servers; a group more than declared, a wrong token or another mode is refused with a
message. When a group's job is over its launcher reports the exit status; the serving
launcher ends the servers once every group has reported or gone away. In mode sync, where
the servers wait for every group's gradients, a group that failed or went away makes the
serving launcher order the other groups to stop, naming it. A joined launcher says when
its group met the others at the parameter server (its leader passed ps-lite's start,
which waits for every group): after that, the others are told of a lost group that it
was given up (their finish line need not wait for it); before that, a group that went
away holds every group back, so (async, easgd) the serving launcher leaves it out and
tells the others their places in a job of one group less, with fresh servers (`again`);
a group that failed then stops them all. It speaks the control channel (control/channel.py).

Both ends beat on the connection every timing.BEAT_SECONDS: a group whose launcher the serving
launcher has not heard from for `lost_seconds` (MXKV_LOST_SECONDS: its host cut off or
dead, the connection never closed) is lost, named with its address; a joined launcher
that has not heard from the serving one that long stops its group, naming the server.

The token keeps a group of another job, or a mistyped address, from joining this one
through the launchers. ps-lite itself authenticates nothing: on a host address its
connections go through relays keyed by the token (serve_relays.py); each joining
launcher says in its hello where its relay will listen.
"""

import logging
import secrets
import select
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import BinaryIO, Callable, Dict, List, Optional, Tuple

from ..capabilities import capabilities_of
from .control import timing
from .control.channel import BEAT, encode, receive, send, token_matches
from .control.keeper import JobAddress
from .control.members import Member, MemberTable
from .control.restarts import OneRejoin
from .control.verdict import judge_silence
from .serve_relays import JoinerRelay

log = logging.getLogger(__name__)


class JoinRefused(Exception):
    """The serving launcher refused this group, or could not be reached."""


@dataclass
class JoinedGroup:
    """A group that joined: its launcher's connection, and its row in the member table
    (`row`: when it was last heard from, whether it went away, its reported exit status)."""

    group: int
    ranks: int
    connection: socket.socket
    stream: BinaryIO
    relay: Optional[JoinerRelay] = None  # where its relay listens (a job behind relays)
    # its launcher's address, kept from the join: a closed connection has none
    address: str = field(init=False)
    row: Member = field(init=False)

    def __post_init__(self) -> None:
        try:
            self.address = self.connection.getpeername()[0]
        except OSError:  # (gone as it joined: its silence names it)
            self.address = "an address no longer known"
        self.row = Member(id(self), self.describe(), self.address, self.address)

    @property
    def running(self) -> bool:
        """Neither reported its end nor went away."""
        return self.row.status is None and not self.row.left

    def describe(self) -> str:
        return f"group {self.group} ({self.ranks} rank(s), joined from {self.address})"


@dataclass
class Rendezvous:
    """The serving side: the control port, the token and the groups that joined."""

    groups: int
    mode: str
    settings: Dict[str, str]  # what a group's ranks need to reach the servers (DMLC_*, PS_*)
    host: str
    lost_seconds: float  # a group not heard from this long is lost (MXKV_LOST_SECONDS)
    token: str = field(default_factory=lambda: secrets.token_hex(16))  # derives the relays' key
    members: List[JoinedGroup] = field(default_factory=list)
    table: MemberTable = field(default_factory=MemberTable)  # the groups' rows
    met: bool = False  # a group said it met the others at the parameter server
    left_out: List[JoinedGroup] = field(default_factory=list)  # lost before they met
    rejoins: OneRejoin = field(default_factory=OneRejoin)  # of the scheduler now running
    last_beat: float = field(default=0.0, init=False)
    # a job behind relays: the table for the members that joined, as environment (and the
    # serving host's relay started for it)
    plan_relays: Optional[Callable[[List[JoinedGroup]], Dict[str, str]]] = None

    def __post_init__(self):
        self._listener = socket.create_server((self.host, 0))
        self.address = f"{self.token}@{self.host}:{self._listener.getsockname()[1]}"

    def _greet(self) -> Optional[Tuple[socket.socket, BinaryIO, dict]]:
        """Accepts one connection; returns it with its hello, or None (refused)."""
        connection, _ = self._listener.accept()
        connection.settimeout(timing.HELLO_SECONDS)
        stream = connection.makefile("rb")
        try:
            hello = receive(stream) or {}
        except (OSError, ValueError):
            hello = {}
        refusal = None
        if not token_matches(hello, self.token):
            refusal = (
                "the token does not match this job's: copy the whole TOKEN@HOST:PORT "
                "that mxkv-launch --serve printed"
            )
        elif hello.get("mode") != self.mode:
            refusal = (
                f"this job trains in MXKV_MODE={self.mode}, and the group asked for "
                f"{hello.get('mode')}: set the same MXKV_MODE on every group"
            )
        elif len(self.members) == self.groups:
            refusal = (
                f"this job was declared with {self.groups} group(s) and all of them "
                "have joined: serve a job with more --groups, or join another job"
            )
        if refusal is not None:
            try:
                send(connection, {"error": refusal})
            except OSError:
                pass
            connection.close()
            return None
        connection.settimeout(None)
        return connection, stream, hello

    def gather(self) -> None:
        """Waits until every declared group has joined, then tells each where it stands."""
        while len(self.members) < self.groups:
            self._beat(self.members)  # the groups that wait know this launcher is there
            if not select.select([self._listener], [], [], timing.BEAT_SECONDS / 2)[0]:
                continue
            greeted = self._greet()
            if greeted is not None:
                connection, stream, hello = greeted
                relay = JoinerRelay(**hello["relay"]) if hello.get("relay") else None
                joined = JoinedGroup(
                    len(self.members), int(hello["ranks"]), connection, stream, relay
                )
                self.table.add(joined.row, time.monotonic())
                self.members.append(joined)
                log.info(
                    f"mxkv-launch: group {len(self.members) - 1} joined with "
                    f"{hello['ranks']} rank(s) ({len(self.members)} of {self.groups})"
                )
        self._assign(None)

    def _assign(self, heading: Optional[str]) -> None:
        """Tells every member its group, its ranks' numbers and the servers' settings (under
        `heading`, "again": a place in a job started again)."""
        total = sum(m.ranks for m in self.members)
        first = 0
        environment = dict(
            self.settings, **(self.plan_relays(self.members) if self.plan_relays else {})
        )
        for member in self.members:
            assignment = {
                "group": member.group,
                "groups": self.groups,
                "first_rank": first,
                "ranks": total,
                "environment": environment,
            }
            try:
                send(member.connection, {heading: assignment} if heading else assignment)
            except OSError:
                pass  # gone: its silence names it
            first += member.ranks

    def regroup(self, settings: Dict[str, str]) -> None:
        """After groups were left out (lost before the groups met): the others, numbered
        again, are told their places in a job of one group less on servers reached with
        `settings`."""
        for member in self.left_out:
            member.connection.close()
        self.members = [m for m in self.members if m not in self.left_out]
        self.left_out = []
        for number, member in enumerate(self.members):
            member.group = number
            member.row.name = member.describe()
        self.groups, self.settings, self.met = len(self.members), settings, False
        self.rejoins = OneRejoin()  # (fresh servers)
        self._assign("again")

    @property
    def over(self) -> bool:
        """Every group reported or went away."""
        return not any(m.running for m in self.members)

    def listen(self, seconds: float) -> None:
        """Collects, for up to `seconds`, the groups' reports (exit statuses, that they
        met; late joiners are refused) and silences: a group lost is named, and stops the
        others or is left out (`left_out`: to regroup), as _lost says."""
        waiting = {m.connection: m for m in self.members if m.running}
        self._beat(waiting.values())
        ready, _, _ = select.select(
            [self._listener, *waiting], [], [], min(seconds, timing.BEAT_SECONDS / 2)
        )
        for source in ready:
            if source is self._listener:
                self._greet()  # a group more than declared: refused
                continue
            member = waiting[source]
            try:
                report = receive(member.stream)
            except (OSError, ValueError):
                report = None
            now = time.monotonic()
            self.table.heard(member.row.key, now)
            if report is None:
                self.table.left(member.row.key, now)
            elif "status" in report:
                self.table.ended(member.row.key, int(report["status"]), now)
            elif report.get("met"):
                self.met = True
            elif "rejoin" in report:
                self._answer_rejoin(member)
            if member.row.left or member.row.status:
                self._lost(member)
        for member in waiting.values():
            found = judge_silence(member.row, self.lost_seconds, time.monotonic())
            if member.running and not found.alive:
                log.warning(f"mxkv-launch: {found.sentence}")
                self.table.left(member.row.key, time.monotonic())
                self._lost(member)

    def _answer_rejoin(self, member: JoinedGroup) -> None:
        """Tells a group's launcher, about to restart it after the groups met, whether it
        may rejoin the servers (OneRejoin: this scheduler takes one, whichever launcher)."""
        why_not = self.rejoins.ask(member.describe())
        log.info(
            f"mxkv-launch: {member.describe()} asked to rejoin the servers' model: "
            + (f"refused: {why_not}" if why_not else "granted")
        )
        try:
            send(member.connection, {"rejoin": why_not or ""})
        except OSError:
            pass  # gone: its silence names it

    def _beat(self, members) -> None:
        """Says something to every running group, at most every timing.BEAT_SECONDS."""
        now = time.monotonic()
        if now - self.last_beat < timing.BEAT_SECONDS:
            return
        self.last_beat = now
        for member in members:
            try:
                member.connection.send(BEAT, socket.MSG_DONTWAIT)
            except OSError:
                pass  # a full buffer: the group is silent, and its silence counts

    def _lost(self, member: JoinedGroup) -> None:
        """A group that went away or failed. Before the groups met, every other group waits
        for it in ps-lite's start: one that went away (its host cut off or dead) is left
        out (async, easgd: the job goes on without it), one that failed stops the others.
        Mode sync: the servers wait for every group's gradients, so a lost group stops the
        others. Each running group's launcher is told which group was lost: after the groups
        met (async, easgd) that it was given up, for its finish line."""
        running = [other for other in self.members if other is not member and other.running]
        if not running:
            return
        how = (
            "went away without reporting"
            if member.row.left
            else f"ended with status {member.row.status}"
        )
        together = capabilities_of(self.mode).groups_step_together
        if not self.met and member.row.left and not together:
            log.warning(
                f"mxkv-launch: {member.describe()} {how} before the groups met at the "
                "parameter server, whose start waits for all: leaving it out; the other "
                "groups start again, with fresh servers, as a job of one group less"
            )
            self.left_out.append(member)
            return
        if together:
            why = f"in MXKV_MODE={self.mode} the servers wait for every group's gradients"
        elif not self.met:
            why = "before the groups met at the parameter server, whose start waits for all"
        else:  # the others go on: their finish line need not wait for it
            log.warning(f"mxkv-launch: {member.describe()} {how}; the other groups go on")
            for other in running:
                try:
                    send(other.connection, {"given_up": member.group})
                except OSError:
                    pass
            return
        reason = f"{member.describe()} {how}, and {why}, so the other groups cannot go on"
        log.warning(f"mxkv-launch: {reason}: stopping them")
        for other in running:
            try:
                send(other.connection, {"stop": reason})
            except OSError:
                pass

    def close(self) -> None:
        for member in self.members:
            member.connection.close()
        self._listener.close()


class Joined:
    """A group's place in a served job: its connection to the serving launcher (to report
    the exit status on), its assignment, and the serving launcher's order to stop (mode
    sync: another group was lost), read as it comes."""

    def __init__(
        self,
        connection: socket.socket,
        stream,
        assignment: dict,
        lost_seconds: float,
        met: Callable[[], bool] = lambda: False,
        given_up: Callable[[int], None] = lambda group: None,
    ):
        """met: whether this group met the others at the parameter server (said once);
        given_up: called with each group the serving launcher gave up."""
        self.connection = connection
        self._given_up = given_up
        self.assignment = assignment
        self.stop_order: Optional[str] = None
        self.again: Optional[dict] = None  # this group's place in the job started again
        self._met = met
        self._said_met = False
        self._rejoin_answer: Optional[str] = None  # why not ("": granted)
        self._answered = threading.Event()
        self._lost_seconds = lost_seconds
        server = "{}:{}".format(*connection.getpeername()[:2])
        self._server = Member(server, f"the serving launcher at {server}", server, server)
        self._server.last_heard = time.monotonic()
        self._sending = threading.Lock()
        self._over = threading.Event()
        threading.Thread(target=self._listen, args=(stream,), daemon=True).start()
        threading.Thread(target=self._beat, daemon=True).start()

    def _listen(self, stream) -> None:
        try:
            while True:
                order = receive(stream)
                if order is None:
                    return
                self._server.last_heard = time.monotonic()
                if "stop" in order:
                    self.stop_order = order["stop"]
                elif "given_up" in order:
                    self._given_up(int(order["given_up"]))
                elif "rejoin" in order:
                    self._rejoin_answer = str(order["rejoin"])
                    self._answered.set()
                elif "again" in order:
                    self.again = order["again"]
                    self.stop_order = (
                        "a group was lost before the groups met at the parameter "
                        "server: the job starts again without it, this group as "
                        f"group {self.again['group']} of {self.again['groups']}"
                    )
        except (OSError, ValueError):
            pass  # the connection closed: nothing more will come

    def _beat(self) -> None:
        """Says something every timing.BEAT_SECONDS: that the group met the others, once, or {}."""
        while not self._over.wait(timing.BEAT_SECONDS):
            say_met = not self._said_met and self._met()
            with self._sending:
                try:
                    self.connection.send(
                        encode({"met": True}) if say_met else BEAT, socket.MSG_DONTWAIT
                    )
                    self._said_met = self._said_met or say_met
                except OSError:
                    pass  # a full buffer: the serving launcher is not reading

    def ask_to_rejoin(self, group: str) -> Optional[str]:
        """Asks the serving launcher, which started the scheduler, whether `group` (as the
        user reads it) may rejoin the servers (OneRejoin). None: it may; else why not."""
        self._answered.clear()
        try:
            with self._sending:
                send(self.connection, {"rejoin": group})
        except OSError as err:
            return f"the serving launcher, which grants the one rejoin, is unreachable ({err})"
        if not self._answered.wait(timing.HEARD_SECONDS):
            return (
                "the serving launcher, which grants the one rejoin ps-lite's scheduler "
                f"takes, did not answer within {timing.HEARD_SECONDS:g} s"
            )
        return self._rejoin_answer or None

    def start_again(self) -> Optional[dict]:
        """The group's place in the job started again without a lost group (then the order
        to stop is forgotten, and the group has not met the others yet), or None."""
        again, self.again = self.again, None
        if again is not None:
            self.assignment, self.stop_order, self._said_met = again, None, False
        return again

    def why_stop(self) -> Optional[str]:
        """The serving launcher's order to stop, or its silence for MXKV_LOST_SECONDS."""
        found = judge_silence(self._server, self._lost_seconds, time.monotonic())
        if self.stop_order is None and not found.alive:
            return found.sentence
        return self.stop_order

    def report(self, status: int) -> None:
        """Tells the serving launcher how this group's job ended."""
        self._over.set()
        try:
            with self._sending:
                self.connection.settimeout(timing.BEAT_SECONDS)
                send(self.connection, {"status": status})
        except OSError:
            pass  # cut off: the serving launcher names this group from its silence
        finally:
            self.connection.close()


def join(
    address: str,
    ranks: int,
    mode: str,
    timeout: float,
    lost_seconds: float,
    met: Callable[[], bool] = lambda: False,
    restarts: int = 0,
    given_up: Callable[[int], None] = lambda group: None,
) -> Joined:
    """Connects to a serving launcher and returns this group's place in the job (`met`:
    whether the group met the others at the parameter server, told as it comes; `given_up`:
    called with each group the serving launcher gave up). Waits as
    long as the other groups take to join; raises JoinRefused with the reason."""
    try:
        token, host, port = JobAddress.parse(address)
    except ValueError as err:
        raise JoinRefused(f"--join {err}, as mxkv-launch --serve printed it") from None
    try:
        connection = socket.create_connection((host, int(port)), timeout=timeout)
    except socket.timeout:
        raise JoinRefused(
            f"could not reach the job at {host}:{port}: no answer within "
            f"{timeout:g} s (MXKV_PS_TIMEOUT); is the port reachable from here?"
        ) from None
    except OSError as err:
        raise JoinRefused(
            f"could not reach the job at {host}:{port}: {err}; is mxkv-launch "
            "--serve running there, and is the port reachable from here?"
        ) from None
    # while the others join, the serving launcher beats ({}); silent this long (a stranger
    # may hold its greeting for timing.HELLO_SECONDS), this host is cut off from it
    silence = lost_seconds + timing.HELLO_SECONDS
    connection.settimeout(silence)
    stream = connection.makefile("rb")
    try:
        relay = JoinerRelay.choose(connection, restarts)  # used if the job has relays
        send(connection, {"token": token, "ranks": ranks, "mode": mode, "relay": asdict(relay)})
        answer = receive(stream)
        while answer == {}:
            answer = receive(stream)
    except socket.timeout:
        answer = {
            "error": f"the serving launcher at {host}:{port} was silent for {silence:g} s "
            "while this group waited for the others to join "
            f"(MXKV_LOST_SECONDS={lost_seconds:g}, and {timing.HELLO_SECONDS:g} s "
            "more): this host is cut off from it, or it is gone"
        }
    except (OSError, ValueError) as err:
        answer = {"error": f"the serving launcher at {host}:{port} broke the connection ({err})"}
    connection.settimeout(None)
    if answer is None or "error" in answer:
        connection.close()
        raise JoinRefused(
            answer["error"]
            if answer
            else "the serving launcher closed the connection without an answer"
        )
    return Joined(connection, stream, answer, lost_seconds, met, given_up)

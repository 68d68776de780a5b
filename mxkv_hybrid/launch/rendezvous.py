"""Where separately started groups meet: `mxkv-launch --serve` and `mxkv-launch --join`.

The serving launcher starts the parameter server and listens on a control port. A group's
launcher (`--join TOKEN@HOST:PORT -n N`) connects, presents the job's token, its mode and
how many ranks it brings. Once all G declared groups are there, each is told its group
number, its ranks' numbers in the whole job and the ps-lite settings to reach the
servers; a group more than declared, a wrong token or another mode is refused with a
message. When a group's job is over its launcher reports the exit status; the serving
launcher ends the servers once every group has reported or gone away. In mode sync, where
the servers wait for every group's gradients, a group that failed or went away makes the
serving launcher order the other groups to stop, naming it. One JSON object per line.

ps-lite authenticates nothing: the token keeps a group of another job, or a mistyped
address, from joining this one through the launchers, but whoever reaches the
scheduler's port directly can still register there.
"""
import hmac
import json
import secrets
import select
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

HELLO_SECONDS = 10.0  # how long a connected launcher may take to say who it is


class JoinRefused(Exception):
    """The serving launcher refused this group, or could not be reached."""


def _send(connection: socket.socket, message: dict) -> None:
    connection.sendall(json.dumps(message).encode() + b"\n")


def _receive(stream) -> Optional[dict]:
    line = stream.readline()
    return json.loads(line) if line else None


@dataclass
class Member:
    """A group that joined: its launcher's connection and, once reported, its exit status."""

    group: int
    ranks: int
    connection: socket.socket
    stream: object
    status: Optional[int] = None
    gone: bool = False


@dataclass
class Rendezvous:
    """The serving side: the control port, the token and the groups that joined."""

    groups: int
    mode: str
    settings: Dict[str, str]  # what a group's ranks need to reach the servers (DMLC_*, PS_*)
    host: str
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    members: List[Member] = field(default_factory=list)

    def __post_init__(self):
        self._listener = socket.create_server((self.host, 0))
        self.address = f"{self.token}@{self.host}:{self._listener.getsockname()[1]}"

    def _greet(self) -> Optional[Tuple[socket.socket, object, int]]:
        """Accepts one connection; returns it with the ranks it brings, or None (refused)."""
        connection, _ = self._listener.accept()
        connection.settimeout(HELLO_SECONDS)
        stream = connection.makefile("r")
        try:
            hello = _receive(stream) or {}
        except (OSError, ValueError):
            hello = {}
        refusal = None
        if not hmac.compare_digest(str(hello.get("token", "")), self.token):
            refusal = "the token does not match this job's: copy the whole TOKEN@HOST:PORT " \
                      "that mxkv-launch --serve printed"
        elif hello.get("mode") != self.mode:
            refusal = (f"this job trains in MXKV_MODE={self.mode}, and the group asked for "
                       f"{hello.get('mode')}: set the same MXKV_MODE on every group")
        elif len(self.members) == self.groups:
            refusal = (f"this job was declared with {self.groups} group(s) and all of them "
                       "have joined: serve a job with more --groups, or join another job")
        if refusal is not None:
            try:
                _send(connection, {"error": refusal})
            except OSError:
                pass
            connection.close()
            return None
        connection.settimeout(None)
        return connection, stream, int(hello["ranks"])

    def gather(self) -> None:
        """Waits until every declared group has joined, then tells each where it stands."""
        while len(self.members) < self.groups:
            greeted = self._greet()
            if greeted is not None:
                self.members.append(Member(len(self.members), greeted[2], greeted[0], greeted[1]))
                print(f"mxkv-launch: group {len(self.members) - 1} joined with {greeted[2]} "
                      f"rank(s) ({len(self.members)} of {self.groups})", flush=True)
        total = sum(m.ranks for m in self.members)
        first = 0
        for member in self.members:
            _send(member.connection, {"group": member.group, "groups": self.groups,
                                      "first_rank": first, "ranks": total,
                                      "environment": self.settings})
            first += member.ranks

    def wait(self, deadline: Optional[float]) -> bool:
        """Collects the groups' exit statuses (refusing late joiners meanwhile) until every
        group reported or went away; False when `deadline` passed first."""
        while not all(m.status is not None or m.gone for m in self.members):
            if deadline is not None and time.monotonic() > deadline:
                return False
            waiting = {m.connection: m for m in self.members if m.status is None and not m.gone}
            ready, _, _ = select.select([self._listener, *waiting], [], [], 0.5)
            for source in ready:
                if source is self._listener:
                    self._greet()  # a group more than declared: refused
                    continue
                member = waiting[source]
                try:
                    report = _receive(member.stream)
                except (OSError, ValueError):
                    report = None
                if report is None:
                    member.gone = True
                else:
                    member.status = int(report["status"])
                if member.gone or member.status:
                    self._lost(member)
        return True

    def _lost(self, member: Member) -> None:
        """Mode sync: the servers wait for every group's gradients, so a lost group stops
        the others; each running group's launcher is told which group was lost."""
        running = [other for other in self.members
                   if other is not member and other.status is None and not other.gone]
        if self.mode != "sync" or not running:
            return
        how = ("went away without reporting" if member.gone else
               f"ended with status {member.status}")
        reason = (f"group {member.group} ({member.ranks} rank(s)) {how}, and in MXKV_MODE=sync "
                  "the servers wait for every group's gradients, so the other groups cannot go on")
        print(f"mxkv-launch: {reason}: stopping them", file=sys.stderr, flush=True)
        for other in running:
            try:
                _send(other.connection, {"stop": reason})
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

    def __init__(self, connection: socket.socket, stream, assignment: dict):
        self.connection = connection
        self.assignment = assignment
        self.stop_order: Optional[str] = None
        threading.Thread(target=self._listen, args=(stream,), daemon=True).start()

    def _listen(self, stream) -> None:
        try:
            for line in stream:
                order = json.loads(line)
                if "stop" in order:
                    self.stop_order = order["stop"]
        except (OSError, ValueError):
            pass  # the connection closed: nothing more will come

    def report(self, status: int) -> None:
        """Tells the serving launcher how this group's job ended."""
        try:
            _send(self.connection, {"status": status})
        finally:
            self.connection.close()


def join(address: str, ranks: int, mode: str, timeout: float) -> Joined:
    """Connects to a serving launcher and returns this group's place in the job. Waits as
    long as the other groups take to join; raises JoinRefused with the reason."""
    token, _, where = address.rpartition("@")
    host, _, port = where.rpartition(":")
    if not token or not host or not port.isdigit():
        raise JoinRefused(f"--join {address}: expected TOKEN@HOST:PORT as mxkv-launch --serve "
                          "printed it")
    try:
        connection = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as err:
        raise JoinRefused(f"could not reach the job at {host}:{port} within {timeout:g} s "
                          f"(MXKV_PS_TIMEOUT): {err}; is mxkv-launch --serve running there, "
                          "and is the port reachable from here?") from None
    connection.settimeout(None)
    stream = connection.makefile("r")
    try:
        _send(connection, {"token": token, "ranks": ranks, "mode": mode})
        answer = _receive(stream)
    except (OSError, ValueError) as err:
        answer = {"error": f"the serving launcher at {host}:{port} broke the connection ({err})"}
    if answer is None or "error" in answer:
        connection.close()
        raise JoinRefused(answer["error"] if answer else "the serving launcher closed the "
                          "connection without an answer")
    return Joined(connection, stream, answer)

"""The link between mxkv-launch and every rank it started, wherever the rank runs: a TCP
connection each on the control channel (channel.py: who, then a heartbeat each way every
beat); the ranks' end is control/keeper.py and its keeper process.

The launcher (`LinkServer`) learns which host every rank runs on and when each was last
heard from, so it can name a lost or cut-off host within MXKV_LOST_SECONDS (4.5 s by
default), which rank ended first (its keeper ends with it, closing its connection), what
the ranks told it (met at the servers, a script's exit, MPI's start), and answers the
ranks' questions (which ranks it hears, which groups it gave up). The link carries the
launcher's token; a connection without it is closed unanswered.
"""

import logging
import secrets
import select
import socket
import threading
import time
from typing import Any, Dict, List

from .channel import BEAT, ChannelError, Lines, send, token_matches
from .members import Member, MemberTable, Phase, rank_member
from .timing import BEAT_SECONDS, HELLO_SECONDS

log = logging.getLogger(__name__)


class LinkServer:
    """The launcher's end: listens on `address`, one thread serving every connection."""

    def __init__(self, address: str):
        self.token = secrets.token_hex(8)
        self._listener = socket.create_server((address, 0))
        self.address = f"{self.token}@{address}:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self.members = MemberTable()  # the ranks: heard, ended, their phase
        # -> {"rank": Optional[int], "lines": Lines, "since": float}
        self._connections: Dict[socket.socket, Dict[str, Any]] = {}
        self._to_close: set = set()  # connections of forgotten ranks, closed by _serve
        self._met = False  # a group leader met the others at the parameter server
        self._closed = False
        self._refused_hosts: set = set()  # hosts whose stray connection was named
        self._given_up: set = set()  # groups lost for good (no restart left)
        self._wake, self._waker = socket.socketpair()  # close() ends the wait at once
        self._thread = threading.Thread(target=self._serve, name="mxkv-launcher-link", daemon=True)
        self._thread.start()

    def ranks(self) -> Dict[int, Member]:
        """The ranks heard from (their hello), by rank."""
        return self.members.rows()  # type: ignore[return-value]

    def met(self) -> bool:
        """Whether a group leader said it met the others at the parameter server (ps-lite
        lets every node through at once, when all have registered)."""
        with self._lock:
            return self._met

    def give_up(self, group: int) -> None:
        """Group `group` was lost and will not be started again: its peers' finish line
        need not wait for it (ask_launcher tells them)."""
        with self._lock:
            self._given_up.add(group)

    def forget_meeting(self) -> None:
        """The parameter server is started again: its groups have not met yet."""
        with self._lock:
            self._met = False

    def forget(self, ranks: List[int]) -> None:
        """Drops what is known of `ranks` (their job was ended, or is started again) and
        closes their connections: a keeper cut off from this launcher that hears from it
        again, once the partition heals, then ends its rank instead of letting it go on
        beside the group's restarted job."""
        self.members.forget(ranks)
        with self._lock:
            self._to_close.update(
                connection
                for connection, state in list(self._connections.items())
                if state["rank"] in ranks
            )

    def _serve(self) -> None:
        last_beat = 0.0
        while not self._closed:
            ready, _, _ = select.select(
                [self._listener, self._wake, *self._connections], [], [], BEAT_SECONDS / 2
            )
            now = time.monotonic()
            for source in ready:
                if source is self._wake:
                    continue
                if source is self._listener:
                    try:
                        connection, _ = self._listener.accept()
                    except OSError:
                        continue
                    connection.setblocking(False)
                    self._connections[connection] = {"rank": None, "lines": Lines(), "since": now}
                else:
                    self._receive(source, now)
            with self._lock:
                to_close, self._to_close = self._to_close, set()
            for connection, state in list(self._connections.items()):
                if connection in to_close or (
                    state["rank"] is None and now - state["since"] > HELLO_SECONDS
                ):
                    self._drop(connection)
            if now - last_beat >= BEAT_SECONDS:
                last_beat = now
                for connection, state in list(self._connections.items()):
                    if state["rank"] is None:
                        continue  # not a rank's link (yet): an ask would read the beat first
                    try:
                        connection.send(BEAT)
                    except (BlockingIOError, OSError):
                        pass  # a full buffer: the peer is silent, and its silence counts

    def _receive(self, connection: socket.socket, now: float) -> None:
        state = self._connections[connection]
        try:
            data = connection.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the rank ended (a cut host's connection goes silent, never closes)
            self._drop(connection)
            return
        try:
            messages = state["lines"].feed(data)
        except ChannelError as err:
            self._refuse(connection, str(err))
            return
        for message in messages:
            if state["rank"] is None:
                if not token_matches(message, self.token):
                    self._refuse(connection, "not this job's token")
                    return
                if message.get("ask") == "ranks":
                    self._answer(connection, now)
                    return
                if message.get("met") or "exited" in message or "mpi" in message:
                    self._note(message, now)
                    self._connections.pop(connection, None)
                    connection.close()
                    return
                rank = state["rank"] = int(message["rank"])
                self.members.add(
                    rank_member(rank, str(message["host"]), str(message["address"]), now), now
                )
                continue
            self.members.heard(state["rank"], now)

    def _note(self, message: dict, now: float) -> None:
        """Records what a rank said: met, its script's exit, or its MPI start."""
        if message.get("met"):
            with self._lock:
                self._met = True
        elif "exited" in message:
            self.members.ended(int(message["exited"]), int(message["status"]), now)
        else:
            phase = Phase.IN_MPI_START if message["mpi"] == "starting" else Phase.RUNNING
            self.members.enter(int(message["rank"]), phase, now)

    def _answer(self, connection: socket.socket, now: float) -> None:
        """Tells a rank what the launcher knows of every rank (ask_launcher), and closes."""
        ranks = {
            rank: {
                "host": seen.host,
                "address": seen.address,
                "left": seen.left,
                "silent": seen.silent_for(now),
            }
            for rank, seen in self.members.rows().items()
        }
        with self._lock:
            given_up = sorted(self._given_up)
        connection.setblocking(True)
        try:
            send(connection, {"ranks": ranks, "given_up": given_up})
        except OSError:
            pass
        self._connections.pop(connection, None)
        connection.close()

    def _refuse(self, connection: socket.socket, why: str) -> None:
        """Closes a connection that is not a rank's link, with one line for its host's first
        (what a stranger or a port scanner sends)."""
        try:
            host = connection.getpeername()[0]
        except OSError:
            host = "an unknown peer"
        if host not in self._refused_hosts:
            self._refused_hosts.add(host)
            log.warning(
                f"mxkv-launch: refused a connection to the launcher's link from {host}: "
                f"{why} (its host's next ones are closed without a word)"
            )
        self._drop(connection)

    def _drop(self, connection: socket.socket) -> None:
        state = self._connections.pop(connection, None)
        connection.close()
        if state is not None and state["rank"] is not None:
            self.members.left(state["rank"], time.monotonic())

    def close(self) -> None:
        self._closed = True
        self._waker.send(b"x")
        self._thread.join(timeout=5)
        for connection in list(self._connections):
            self._drop(connection)
        for end in (self._listener, self._wake, self._waker):
            end.close()

"""The link between mxkv-launch and every rank it started, wherever the rank runs: a TCP
connection each, one line a second each way (JSON: who, then heartbeats).

The launcher (`LinkServer`) learns which host every rank runs on and when each was last
heard from, so it can name a lost or cut-off host within MXKV_LOST_SECONDS (30 s by
default). Each rank's end is a small keeper process (`keep_link`, this file run as a
script: no MXNet, no MPI), started at `import mxkv_hybrid` when MXKV_LAUNCHER_LINK is set,
before MPI_Init: a rank blocked in MPI_Init or in C code with Python's lock held cannot
run a thread, but its keeper still ends it when the launcher has been silent for that
long or cannot be reached at start, so that no rank is left spinning on a host cut off
from the job. The keeper ends with its rank. The link carries the launcher's token; a
connection without it is closed unanswered.

A rank may also ask the launcher which ranks it hears from (`ask_launcher`): the stall
monitor sends MPI messages only to those, since MPICH crashes (SIGSEGV in MPI_Isend) when it
sends to a peer on a host cut off long enough for UCX to fail the connection. A group
leader tells the launcher once it has met the others at the parameter server
(`tell_launcher_met`): a group lost before that holds every group back, and the launcher
starts the others again without it. A rank whose script ends says with which status
(`tell_launcher_exit`, from mxkv_hybrid.run): one that fails while the others go on would
hold them in their next collective, and mpiexec does not end them. A rank also says when it
starts MPI and when its start is through (`tell_launcher_mpi`): MPI's start waits for every
rank of the MPI job, so a rank whose script ended before it started MPI, even with status 0,
holds the others there for ever, before any stall monitor runs. The launcher says which
groups it gave up (lost, no restart left: `groups_given_up`), so that the others' finish
line goes on without them at once.
"""

import hmac
import json
import logging
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Union

log = logging.getLogger(__name__)
BEAT_SECONDS = 1.0
LINE_BYTES = 1 << 16  # longer than any line of the link: a stranger's, closed
HELLO_SECONDS = 5.0  # a connection that has not said who it is by then is closed
HEARD_SECONDS = 3 * BEAT_SECONDS  # a rank heard from within this long is reachable


class JobAddress(NamedTuple):
    """A launcher's address as ranks and joining groups are given it: TOKEN@HOST:PORT."""

    token: str
    host: str
    port: int

    @classmethod
    def parse(cls, address: str) -> "JobAddress":
        """Raises ValueError naming the expected form."""
        token, _, where = address.rpartition("@")
        host, _, port = where.rpartition(":")
        if not token or not host or not port.isdigit():
            raise ValueError(f"{address!r}: expected TOKEN@HOST:PORT")
        return cls(token, host, int(port))

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class RankExit:
    """A rank's script ended with `status` at `when` (the launcher's clock)."""

    rank: int
    status: int
    when: float


@dataclass
class RankSeen:
    """What the launcher knows of one rank: its host and address, when it was last heard
    from, and whether its connection closed (it ended: a crash is mpiexec's to report)."""

    rank: int
    host: str
    address: str
    last_heard: float
    left: bool = False
    left_at: float = 0.0  # when its connection closed (the launcher's clock)

    def silent_for(self, now: float) -> float:
        return 0.0 if self.left else now - self.last_heard

    def heard(self, now: float) -> bool:
        """Alive and heard from within HEARD_SECONDS: reachable."""
        return not self.left and self.silent_for(now) <= HEARD_SECONDS

    def describe_silence(self, now: float) -> str:
        if self.left:
            return f"rank {self.rank} on {self.host} ({self.address}): its link closed (it ended)"
        return (
            f"rank {self.rank} on {self.host} ({self.address}): the launcher last heard "
            f"from it {self.silent_for(now):.0f} s ago (its host cut off or dead)"
        )


class LinkServer:
    """The launcher's end: listens on `address`, one thread serving every connection."""

    def __init__(self, address: str):
        self.token = secrets.token_hex(8)
        self._listener = socket.create_server((address, 0))
        self.address = f"{self.token}@{address}:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._ranks: Dict[int, RankSeen] = {}
        # -> {"rank": Optional[int], "buffer": bytes, "since": float}
        self._connections: Dict[socket.socket, Dict[str, Any]] = {}
        self._to_close: set = set()  # connections of forgotten ranks, closed by _serve
        self._met = False  # a group leader met the others at the parameter server
        self._exits: Dict[int, RankExit] = {}  # the ranks whose script ended, as they said
        self._mpi_starts: Dict[int, float] = {}  # ranks in MPI's start, since when
        self._mpi_started: set = set()  # ranks through MPI's start
        self._closed = False
        self._refused_hosts: set = set()  # hosts whose stray connection was named
        self._given_up: set = set()  # groups lost for good (no restart left)
        self._wake, self._waker = socket.socketpair()  # close() ends the wait at once
        self._thread = threading.Thread(target=self._serve, name="mxkv-launcher-link", daemon=True)
        self._thread.start()

    def ranks(self) -> Dict[int, RankSeen]:
        with self._lock:
            return dict(self._ranks)

    def met(self) -> bool:
        """Whether a group leader said it met the others at the parameter server (ps-lite
        lets every node through at once, when all have registered)."""
        with self._lock:
            return self._met

    def exits(self) -> Dict[int, "RankExit"]:
        """The ranks whose script ended (tell_launcher_exit), by rank."""
        with self._lock:
            return dict(self._exits)

    def mpi_starts(self) -> Dict[int, float]:
        """The ranks in MPI's start (tell_launcher_mpi), and since when (this clock)."""
        with self._lock:
            return dict(self._mpi_starts)

    def mpi_started(self, rank: int) -> bool:
        """Whether `rank` said it started MPI (or is starting it)."""
        with self._lock:
            return rank in self._mpi_started or rank in self._mpi_starts

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
        with self._lock:
            for rank in ranks:
                self._ranks.pop(rank, None)
                self._exits.pop(rank, None)
                self._mpi_starts.pop(rank, None)
                self._mpi_started.discard(rank)
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
                    self._connections[connection] = {"rank": None, "buffer": b"", "since": now}
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
                for connection in list(self._connections):
                    try:
                        connection.send(b"{}\n")
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
        state["buffer"] += data
        *lines, state["buffer"] = state["buffer"].split(b"\n")
        if len(state["buffer"]) > LINE_BYTES:
            self._refuse(connection, "a line longer than any the link sends")
            return
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                self._refuse(connection, "not a message of the link")
                return
            if state["rank"] is None:
                if not hmac.compare_digest(str(message.get("token", "")), self.token):
                    self._refuse(connection, "not this job's token")
                    return
                if message.get("ask") == "ranks":
                    self._answer(connection, now)
                    return
                if message.get("met") or "exited" in message or "mpi" in message:
                    with self._lock:
                        self._note(message, now)
                    self._connections.pop(connection, None)
                    connection.close()
                    return
                rank = state["rank"] = int(message["rank"])
                with self._lock:
                    self._ranks[rank] = RankSeen(
                        rank, str(message["host"]), str(message["address"]), now
                    )
                continue
            with self._lock:
                seen = self._ranks.get(state["rank"])
                if seen is not None:
                    seen.last_heard = now

    def _note(self, message: dict, now: float) -> None:
        """Records what a rank said: met, its script's exit, or its MPI start (under the lock)."""
        if message.get("met"):
            self._met = True
        elif "exited" in message:
            rank = int(message["exited"])
            self._exits[rank] = RankExit(rank, int(message["status"]), now)
        elif message["mpi"] == "starting":
            self._mpi_starts[int(message["rank"])] = now
        else:
            rank = int(message["rank"])
            self._mpi_starts.pop(rank, None)
            self._mpi_started.add(rank)

    def _answer(self, connection: socket.socket, now: float) -> None:
        """Tells a rank what the launcher knows of every rank (ask_launcher), and closes."""
        with self._lock:
            ranks = {
                rank: {
                    "host": seen.host,
                    "address": seen.address,
                    "left": seen.left,
                    "silent": seen.silent_for(now),
                }
                for rank, seen in self._ranks.items()
            }
            given_up = sorted(self._given_up)
        connection.setblocking(True)
        try:
            connection.sendall(json.dumps({"ranks": ranks, "given_up": given_up}).encode() + b"\n")
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
            with self._lock:
                seen = self._ranks.get(state["rank"])
                if seen is not None and not seen.left:
                    seen.left, seen.left_at = True, time.monotonic()

    def close(self) -> None:
        self._closed = True
        self._waker.send(b"x")
        self._thread.join(timeout=5)
        for connection in list(self._connections):
            self._drop(connection)
        for end in (self._listener, self._wake, self._waker):
            end.close()


class LinkKeeper:
    """A rank's end of the link, in its keeper process: says who the rank is, beats every
    second, and ends the rank (then itself) when the launcher has been silent for
    `lost_seconds`, closed the link, or cannot be reached that long; ends when the rank does."""

    def __init__(self, address: str, rank: int, lost_seconds: float, rank_pid: int):
        job = JobAddress.parse(address)
        self._token, self._where, self._rank = job.token, (job.host, job.port), rank
        self._lost_seconds = lost_seconds
        self._rank_pid = rank_pid
        self._rank_ended = os.pidfd_open(rank_pid)

    def _end_rank(self, why: str) -> None:
        sys.stderr.write(
            f"mxkv_hybrid: rank {self._rank} on {socket.gethostname()}: {why} "
            f"(MXKV_LOST_SECONDS={self._lost_seconds:g}): the launcher is gone or "
            "this host is cut off from it; ending this rank\n"
        )
        sys.stderr.flush()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(self._rank_pid, sig)
            except ProcessLookupError:
                break
            if select.select([self._rank_ended], [], [], 3.0)[0]:
                break
        os._exit(1)

    def _wait(self, seconds: float) -> None:
        """Sleeps `seconds`; exits at once when the rank has ended."""
        if select.select([self._rank_ended], [], [], seconds)[0]:
            os._exit(0)

    def _connect(self) -> socket.socket:
        started = time.monotonic()
        while True:
            try:
                connection = socket.create_connection(self._where, timeout=BEAT_SECONDS)
                break
            except OSError as err:
                if time.monotonic() - started > self._lost_seconds:
                    self._end_rank(
                        f"could not reach the launcher at {self._where[0]}:"
                        f"{self._where[1]} for {self._lost_seconds:g} s ({err})"
                    )
                self._wait(BEAT_SECONDS)
        hello = {
            "token": self._token,
            "rank": self._rank,
            "host": socket.gethostname(),
            "address": connection.getsockname()[0],
        }
        connection.sendall(json.dumps(hello).encode() + b"\n")
        connection.setblocking(False)
        return connection

    def run(self) -> None:
        connection = self._connect()
        heard = time.monotonic()
        while True:
            try:
                connection.send(b"{}\n")
            except (BlockingIOError, InterruptedError):
                pass  # a full buffer: the launcher is not reading; its silence counts
            except OSError:
                self._end_rank("the launcher closed its link")
            watched: List[Union[socket.socket, int]] = [connection, self._rank_ended]
            ready, _, _ = select.select(watched, [], [], BEAT_SECONDS)
            if self._rank_ended in ready:
                os._exit(0)
            if connection in ready:
                try:
                    data = connection.recv(4096)
                except OSError as err:
                    self._end_rank(f"the launcher's link failed ({err})")
                if not data:
                    self._end_rank("the launcher closed its link")
                heard = time.monotonic()
            if time.monotonic() - heard > self._lost_seconds:
                self._end_rank(
                    f"no word from the launcher at {self._where[0]}:"
                    f"{self._where[1]} for {time.monotonic() - heard:.0f} s"
                )


def _ask(address: str, what: str, timeout: float) -> Optional[dict]:
    """The launcher's answer at `address` (MXKV_LAUNCHER_LINK), `what` of it; None when it
    cannot be asked within `timeout` seconds."""
    try:
        job = JobAddress.parse(address)
        with socket.create_connection((job.host, job.port), timeout=timeout) as connection:
            connection.sendall(json.dumps({"token": job.token, "ask": "ranks"}).encode() + b"\n")
            reply = connection.makefile("rb").readline()
        return json.loads(reply)[what]
    except (OSError, ValueError, KeyError):
        return None


def ask_launcher(address: str, timeout: float = 2 * BEAT_SECONDS) -> Optional[Dict[int, RankSeen]]:
    """What the launcher at `address` (MXKV_LAUNCHER_LINK) knows of every rank, as seen now
    on this clock; None when it cannot be asked within `timeout` seconds."""
    ranks = _ask(address, "ranks", timeout)
    if ranks is None:
        return None
    now = time.monotonic()
    return {
        int(rank): RankSeen(
            int(rank),
            seen["host"],
            seen["address"],
            now - float(seen["silent"]),
            bool(seen["left"]),
        )
        for rank, seen in ranks.items()
    }


def groups_given_up(address: str, timeout: float = 2 * BEAT_SECONDS) -> List[int]:
    """The groups the launcher at `address` gave up (lost, no restart left); [] when it
    cannot be asked or there is no launcher."""
    given_up = _ask(address, "given_up", timeout) if address else None
    return [int(group) for group in given_up or []]


def _tell_launcher(address: str, message: dict, timeout: float = 2 * BEAT_SECONDS) -> None:
    """Sends `message` to the launcher at `address` (MXKV_LAUNCHER_LINK; "" without one);
    a launcher it cannot reach is the keeper's business."""
    if not address:
        return
    try:
        job = JobAddress.parse(address)
        with socket.create_connection((job.host, job.port), timeout=timeout) as connection:
            connection.sendall(json.dumps(dict(message, token=job.token)).encode() + b"\n")
    except (OSError, ValueError):
        pass


def tell_launcher_met(address: str) -> None:
    """A group leader past ps-lite's start tells the launcher that the groups met."""
    _tell_launcher(address, {"met": True})


def tell_launcher_exit(status: int, environ=os.environ) -> None:
    """This rank's script ended with `status`: tells its launcher, if it has one."""
    rank = rank_in_job(environ)
    if rank is not None:
        _tell_launcher(_link_address(environ), {"exited": rank, "status": status})


def tell_launcher_mpi(stage: str, environ=os.environ) -> None:
    """This rank is `stage` ("starting" or "started") MPI: tells its launcher, if it has one."""
    rank = rank_in_job(environ)
    if rank is not None:
        _tell_launcher(_link_address(environ), {"mpi": stage, "rank": rank})


def _link_address(environ) -> str:
    """MXKV_LAUNCHER_LINK: the launcher's link, '' outside mxkv-launch."""
    from ..config import read_knob  # not at the top: the keeper runs this file as a script

    return read_knob("MXKV_LAUNCHER_LINK", environ)


def rank_in_job(environ=os.environ) -> Optional[int]:
    """This process's rank, numbered as in the whole job (a group job's first_rank added),
    or None outside an MPI job."""
    local = environ.get("PMI_RANK", environ.get("OMPI_COMM_WORLD_RANK"))
    if local is None:
        return None
    from ..config import read_knob  # not at the top: the keeper runs this file as a script

    job = read_knob("MXKV_GROUP_JOB", environ)
    return (job.first_rank if job is not None else 0) + int(local)


def ranks_in_job(environ=os.environ) -> Optional[int]:
    """The ranks of the whole job (all group jobs'), or None outside an MPI job."""
    size = environ.get("PMI_SIZE", environ.get("OMPI_COMM_WORLD_SIZE"))
    if size is None:
        return None
    from ..config import read_knob  # not at the top: the keeper runs this file as a script

    job = read_knob("MXKV_GROUP_JOB", environ)
    return job.ranks if job is not None else int(size)


def start_for_this_rank(environ=os.environ) -> None:
    """A rank started by mxkv-launch (MXKV_LAUNCHER_LINK and an MPI rank set): starts its
    keeper, the rank numbered as in the whole job (a group job's first_rank added)."""
    address = _link_address(environ)
    rank = rank_in_job(environ)
    if not address or rank is None:
        return
    from ..config import read_knob  # not at the top: the keeper runs this file as a script

    subprocess.Popen(
        [
            sys.executable,
            __file__,
            address,
            str(rank),
            str(read_knob("MXKV_LOST_SECONDS", environ)),
            str(os.getpid()),
        ],
        stdin=subprocess.DEVNULL,
    )


if __name__ == "__main__":
    try:
        keeper = LinkKeeper(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    except ProcessLookupError:
        sys.exit(0)  # the rank ended before its keeper started (it failed at start-up)
    keeper.run()

"""One host's relay for ps-lite's connections between hosts (docs/architecture/ps-lite-wiring.md).

ps-lite authenticates nothing and aborts on a malformed message, so its nodes listen on
loopback only, and a connection from one host to a node on another travels through the two
hosts' relays:

    node on host A --tcp--> relay A (a stand-in listener on A's loopback, one per remote node)
                   ==TLS 1.3, both sides holding the job's key==> relay B (its network address)
                   --tcp--> the node on B's loopback

After the handshake the dialling relay names its target in one line ("host:port\\n"); relay B
connects only to the nodes of its own host that its plan lists. A connection that fails the
handshake, or names another target, is closed before a byte reaches a node, with one line on
stderr naming the peer (a host that keeps trying, as a refused ps-lite node dials every
100 ms, is counted for --quiet-seconds after its line, then named again with the count).
Each proxied connection is its own TLS connection (no stream waits behind another), has no
idle timeout (ps-lite's connections idle for a whole run), and ends on both sides as soon
as either side ends (ps-lite has no resend: a half-open link would only hide the loss).
asyncio accepts; each connection then has a thread of its own, whose TLS and copying run in
C++ (csrc/relay/tls_stream.h, OpenSSL, without the GIL): Python's TLS layer cost a core per
~600 MB/s (examples/benchmarks/relay.py).

    python -m mxkv_hybrid.launch.relay --plan PLAN.json --key JOB.pem [--quiet-seconds 60]

PLAN.json: {"tls": "host:port", "local": ["host:port", ...],
            "stand_ins": {"host:port": {"relay": "host:port", "target": "host:port"}, ...}}
(a stand-in listens where ps-lite dials a remote node, normally the target's own address).
"""

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from typing import Awaitable, Callable, Dict, Iterator, List, Optional, Set, Tuple

from ..config import read_knob
from ..logs import TO_STDERR
from ..logs import configure as configure_logs
from ..ps.node_addresses import Endpoint, RelayPlan, StandIn
from ._tls import TlsContext, TlsStream
from .control.timing import BEAT_SECONDS
from .job_key import tls_context

TARGET_LINE_BYTES = 64  # the longest target line a relay reads
HANDSHAKE_SECONDS = 10.0  # for the handshake, and again for the target line, or the peer is dropped
QUIET_SECONDS = 60.0  # default of --quiet-seconds
PING, PONG = b"ping", b"pong\n"  # a relay checking that it still reaches another


Peer = Tuple[str, int]
log = logging.getLogger("mxkv_hybrid.launch.relay")  # run as __main__ (python -m)


def say(line: str, level: int = logging.WARNING) -> None:
    """One relay line on stderr: a warning unless `level` says otherwise."""
    log.log(level, f"mxkv-relay: {line}", extra=TO_STDERR)


class ThrottledLines:
    """Lines about something that repeats (a refused host, which ps-lite makes dial again
    every 100 ms; a node that has ended while its peers still dial it): the first line of a
    subject is written, the subject's next ones within `quiet_seconds` are counted, and the
    count is written with its next line after that, or at close()."""

    def __init__(self, quiet_seconds: float = QUIET_SECONDS):
        self._quiet_seconds = quiet_seconds
        self._last: Dict[str, float] = {}  # subject -> when its last line was written
        self._unsaid: Dict[str, int] = {}  # subject -> lines counted since
        self._lock = threading.Lock()  # each connection's thread may say something

    def say(self, subject: str, line: str) -> None:
        with self._lock:
            now = time.monotonic()
            if subject in self._last and now - self._last[subject] < self._quiet_seconds:
                self._unsaid[subject] = self._unsaid.get(subject, 0) + 1
                return
            more = self._unsaid.pop(subject, 0)
            say(f"{line} (and {more} more {subject} before this)" if more else line)
            self._last[subject] = now

    def close(self) -> None:
        with self._lock:
            for subject, count in self._unsaid.items():
                say(f"{count} more {subject}")
            self._unsaid.clear()


def bound_silence(sock, lost_seconds: float) -> None:
    """A connection between hosts fails once the far side has not acknowledged data for
    `lost_seconds` (TCP_USER_TIMEOUT) or answered keepalive probes for as long (1 s
    apart): a host cut off drops its connections within the job's bound, so ps-lite's
    nodes see them end and dial again instead of queueing behind a link that TCP's
    retransmission backoff would revive only seconds to minutes after it heals."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, max(1, int(lost_seconds)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(lost_seconds * 1000))


class _Stopped:
    """How long this process was not running (stopped with its host, SIGSTOP, or starved):
    time the watch cannot blame on the far relay. A tick every TICK_SECONDS that wakes
    more than a second late adds its lateness."""

    TICK_SECONDS = 0.1

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self.seconds = 0.0

    async def count(self) -> None:
        last = self._loop.time()
        while True:
            await asyncio.sleep(self.TICK_SECONDS)
            now = self._loop.time()
            if now - last - self.TICK_SECONDS > 1.0:
                self.seconds += now - last - self.TICK_SECONDS
            last = now


class Relay:
    """Listens with asyncio; each connection is served on its own thread, whose TLS and
    copying run in C++ (csrc/relay/tls_stream.h) without the GIL."""

    def __init__(
        self,
        plan: RelayPlan,
        key_path: str,
        quiet_seconds: float,
        lost_seconds: float,
    ):
        self._plan = plan
        self._lost_seconds = lost_seconds
        self._accepting = TlsContext(key_path, server=True)
        self._dialling = TlsContext(key_path, server=False)
        self._pinging = tls_context(key_path, server=False)  # watch()'s, in asyncio
        self._listeners: List[Tuple[socket.socket, Callable[[socket.socket, Peer], None]]] = []
        self._tasks: Set[asyncio.Future] = set()  # asyncio holds tasks weakly: these hold them
        self._streams: Set[TlsStream] = set()  # being served, stopped by close()
        self._threads: Set[threading.Thread] = set()
        self._lock = threading.Lock()  # for the two sets
        self.lines = ThrottledLines(quiet_seconds)

    def _keep(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def start(self) -> None:
        """Listens everywhere the plan says; raises at once if an address is taken."""
        tls = self._plan.tls
        self._listeners.append((_listener(tls), self._from_relay))
        for listen, stand_in in self._plan.stand_ins.items():
            self._listeners.append(
                (_listener(listen), functools.partial(self._from_node, stand_in))
            )

    def serve(self) -> None:
        """Serves until close() (start first)."""
        for listener, handle in self._listeners:
            self._keep(self._accept(listener, handle))

    async def _accept(self, listener: socket.socket, handle) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, peer = await loop.sock_accept(listener)
            thread = threading.Thread(target=self._serve, args=(handle, conn, peer), daemon=True)
            with self._lock:
                self._threads.add(thread)
            thread.start()

    def _serve(self, handle, conn: socket.socket, peer: Peer) -> None:
        try:
            handle(conn, peer)
        finally:
            conn.close()  # (a no-op once its descriptor was handed to a stream)
            with self._lock:
                self._threads.discard(threading.current_thread())

    @contextlib.contextmanager
    def _stream(self, context: TlsContext, conn: socket.socket) -> Iterator[TlsStream]:
        """A TLS connection on `conn` (which it takes), that close() can stop."""
        bound_silence(conn, self._lost_seconds)
        stream = TlsStream(context, _handed_over(conn))
        with self._lock:
            self._streams.add(stream)
        try:
            yield stream
        finally:
            with self._lock:
                self._streams.discard(stream)

    def _from_node(self, stand_in: StandIn, conn: socket.socket, _peer: Peer) -> None:
        """A local node dialled a remote one: carry the connection to its host's relay."""
        try:
            far = socket.create_connection(
                (stand_in.relay.host, stand_in.relay.port), timeout=HANDSHAKE_SECONDS
            )
        except OSError as err:
            return self._unreachable(stand_in, err)
        with self._stream(self._dialling, far) as stream:
            try:
                stream.handshake(HANDSHAKE_SECONDS)
                stream.write(f"{stand_in.target}\n".encode(), HANDSHAKE_SECONDS)
            except OSError as err:  # TlsError and TimeoutError among them
                return self._unreachable(stand_in, err)
            stream.carry(_handed_over(conn))

    def _unreachable(self, stand_in: StandIn, err: OSError) -> None:
        self.lines.say(
            f"failed connection(s) to the relay {stand_in.relay}",
            f"cannot reach the relay {stand_in.relay} for {stand_in.target}: {err}",
        )

    def _from_relay(self, conn: socket.socket, peer: Peer) -> None:
        """Another relay, once it passes the handshake: connect to the local node it names."""
        with self._stream(self._accepting, conn) as stream:
            try:
                stream.handshake(HANDSHAKE_SECONDS)
            except OSError as err:
                return self._refuse(
                    peer, f"the TLS handshake failed ({err.__class__.__name__}: {err})"
                )
            line = b""
            try:
                line = stream.read_line(TARGET_LINE_BYTES, HANDSHAKE_SECONDS)
                target: Optional[Endpoint] = Endpoint.parse(line.decode("ascii").strip())
            except (ValueError, UnicodeDecodeError, OSError):
                target = None
            if line.strip() == PING:  # another host's relay checking it still reaches this one
                with contextlib.suppress(OSError):
                    stream.write(PONG, HANDSHAKE_SECONDS)
                return None
            if target is None or target not in self._plan.local:
                return self._refuse(
                    peer,
                    f"it asked for {target or 'no valid target'}, which is not a node of this host",
                )
            try:
                near = socket.create_connection(
                    (target.host, target.port), timeout=HANDSHAKE_SECONDS
                )
            except OSError as err:
                self.lines.say(
                    f"failed connection(s) to the local node {target}",
                    f"cannot reach the local node {target} for {peer[0]}:{peer[1]}: {err}",
                )
                return None
            stream.carry(_handed_over(near))

    async def watch(self, relay: Endpoint, lost_seconds: float) -> None:
        """Returns once `relay` (the launcher's host's) has not answered for `lost_seconds`:
        this host is cut off from the job, and its relay ends like the ranks' keepers do."""
        loop = asyncio.get_running_loop()
        heard = loop.time()
        stopped = _Stopped(loop)  # a host stopped (SIGSTOP) is not a silent peer
        self._keep(stopped.count())
        while loop.time() - heard - stopped.seconds < lost_seconds:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        relay.host, relay.port, ssl=self._pinging, server_hostname=""
                    ),
                    HANDSHAKE_SECONDS,
                )
                writer.write(PING + b"\n")
                if await asyncio.wait_for(reader.readline(), HANDSHAKE_SECONDS) == PONG:
                    heard, stopped.seconds = loop.time(), 0.0
                writer.close()
            except (OSError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(BEAT_SECONDS)
        say(
            f"the relay of the launcher's host ({relay}) has not answered for "
            f"{lost_seconds:g} s: this host is cut off from the job; ending"
        )

    def _refuse(self, peer: Peer, why: str) -> None:
        self.lines.say(
            f"refused connection(s) from {peer[0]}",
            f"refused a connection from {peer[0]}:{peer[1]}: {why}",
        )

    def close(self) -> None:
        """Stops listening and ends every connection (call once asyncio's tasks are done)."""
        for listener, _ in self._listeners:
            listener.close()
        with self._lock:
            for stream in self._streams:
                stream.stop()
            threads = list(self._threads)
        deadline = time.monotonic() + HANDSHAKE_SECONDS  # (a dial may still be connecting)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.lines.close()


def _listener(where: Endpoint) -> socket.socket:
    listener = socket.create_server((where.host, where.port), backlog=128)
    listener.setblocking(False)
    return listener


def _handed_over(conn: socket.socket) -> int:
    """`conn`'s descriptor, for C++ to own (a TlsStream's socket, or the node's its carry()
    copies to), without Nagle's delay: ps-lite's small messages must not wait."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn.detach()


async def _run(
    plan: RelayPlan,
    key_path: str,
    quiet_seconds: float,
    lost_seconds: float,
    forget_key: bool = False,
    watch: Optional[Endpoint] = None,
) -> None:
    relay = Relay(plan, key_path, quiet_seconds, lost_seconds)
    if forget_key:  # loaded: the file goes (the directory with it, at exit)
        os.unlink(key_path)
    relay.start()
    # the line its starter waits for (relay_setup.start_ready): printed at every log level
    print(
        f"mxkv-relay: ready: TLS on {plan.tls}, {len(plan.stand_ins)} stand-in(s), "
        f"{len(plan.local)} local node(s)",
        file=sys.stderr,
        flush=True,
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    relay.serve()
    if watch is not None:
        relay._keep(_set_when_done(relay.watch(watch, lost_seconds), stop))
    await stop.wait()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:  # the listeners and the watch, ended while the loop runs
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    relay.close()


async def _set_when_done(work, event: asyncio.Event) -> None:
    await work
    event.set()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mxkv_hybrid.launch.relay", description=__doc__.split("\n\n")[0]
    )
    plans = parser.add_mutually_exclusive_group(required=True)
    plans.add_argument("--plan", help="the relay's plan: a JSON file (see above)")
    plans.add_argument("--plan-json", help="the relay's plan as JSON text")
    keys = parser.add_mutually_exclusive_group(required=True)
    keys.add_argument("--key", help="the job's key file (launch/job_key.py)")
    keys.add_argument(
        "--key-env",
        metavar="NAME",
        help="the environment variable that holds the job's key (PEM text): how "
        "mxkv-launch hands it to the relays of other hosts",
    )
    parser.add_argument(
        "--quiet-seconds",
        type=float,
        default=QUIET_SECONDS,
        help="after a refusal, count the same host's next ones this long "
        "instead of writing a line each (default %(default)s)",
    )
    parser.add_argument(
        "--watch",
        metavar="HOST:PORT",
        help="the relay of the launcher's host: end when it has not answered "
        "for --lost-seconds (a host cut off from the job)",
    )
    parser.add_argument(
        "--lost-seconds",
        type=float,
        default=read_knob("MXKV_LOST_SECONDS"),
        help="the job's bound on a silent host (default: MXKV_LOST_SECONDS, %(default)s): "
        "--watch's, and how long a connection to another host may go unacknowledged",
    )
    args = parser.parse_args(argv)
    configure_logs(is_rank=False)
    watch = Endpoint.parse(args.watch) if args.watch else None
    if args.plan:
        with open(args.plan) as f:
            args.plan_json = f.read()
    plan = RelayPlan.from_json(args.plan_json)
    if args.key:
        asyncio.run(_run(plan, args.key, args.quiet_seconds, args.lost_seconds, watch=watch))
        return
    with tempfile.TemporaryDirectory(prefix="mxkv-relay-") as directory:  # mode 0700
        key = os.path.join(directory, "job.pem")
        with open(key, "w") as f:
            f.write(os.environ[args.key_env])
        asyncio.run(
            _run(plan, key, args.quiet_seconds, args.lost_seconds, forget_key=True, watch=watch)
        )


if __name__ == "__main__":
    main()

"""The relay that carries ps-lite's connections between hosts (mxkv_hybrid/launch/relay.py),
as real processes on loopback: a stand-in listener on relay A leads through TLS to relay B
and on to a node (an echo server here, which records every byte it receives). Bytes arrive
intact, many connections at once; strangers (garbage, a TLS client with another job's key,
a relay asking for a node its plan does not list) are refused with one line each and no byte
of theirs reaches the node; when the node hangs up, the dialling side sees the end; a relay
told to end does so while it carries connections."""

import hashlib
import os
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mxkv_hybrid.launch.job_key import make_job_key, tls_context
from mxkv_hybrid.launch.processes import end_process_group, free_port
from mxkv_hybrid.launch.relay_setup import start_ready
from mxkv_hybrid.ps.node_addresses import Endpoint, RelayPlan, StandIn

HOST = "127.0.0.1"
TIMEOUT = 20.0


class EchoNode(socketserver.ThreadingTCPServer):
    """A TCP server standing for a ps-lite node: echoes, and counts the connections and the
    bytes it got."""

    daemon_threads = True

    def __init__(self):
        super().__init__((HOST, 0), _Echo)
        self.port = self.server_address[1]
        self.received = 0
        self.connections = 0
        self.hang_up_after = None  # bytes echoed, after which the node closes a connection
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        node = self.server
        node.connections += 1
        while data := self.request.recv(1 << 16):
            node.received += len(data)
            self.request.sendall(data)
            if node.hang_up_after is not None and node.received >= node.hang_up_after:
                return


def start_relay(tmp_path, name: str, plan: RelayPlan, key: str) -> subprocess.Popen:
    """A relay process that writes a line for every refusal (--quiet-seconds 0)."""
    plan_path = tmp_path / f"{name}.json"
    plan_path.write_text(plan.to_json())
    relay = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch.relay",
            "--plan",
            str(plan_path),
            "--key",
            key,
            "--quiet-seconds",
            "0",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    line = relay.stderr.readline()
    assert "ready" in line, line
    return relay


def stop(relay: subprocess.Popen) -> str:
    """Ends a relay; returns what it wrote to stderr after 'ready'."""
    relay.terminate()
    try:
        _, err = relay.communicate(timeout=TIMEOUT)
    finally:
        relay.kill()
    return err


@pytest.fixture
def relays(tmp_path):
    """(node, stand-in port, relay B's TLS port, relay processes, job key path)."""
    key = str(tmp_path / "job.pem")
    make_job_key(key)
    node = EchoNode()
    tls_b, tls_a, stand_in = free_port(HOST), free_port(HOST), free_port(HOST)
    target = Endpoint(HOST, node.port)
    relay_b = start_relay(
        tmp_path, "b", RelayPlan(Endpoint(HOST, tls_b), frozenset([target]), {}), key
    )
    relay_a = start_relay(
        tmp_path,
        "a",
        RelayPlan(
            Endpoint(HOST, tls_a),
            frozenset(),
            {Endpoint(HOST, stand_in): StandIn(Endpoint(HOST, tls_b), target)},
        ),
        key,
    )
    yield node, stand_in, tls_b, (relay_a, relay_b), key
    for relay in (relay_a, relay_b):
        relay.kill()
        relay.wait()
    node.close()


def echo_through(port: int, payload: bytes) -> bytes:
    with socket.create_connection((HOST, port), timeout=TIMEOUT) as conn:
        got = bytearray()
        sender = threading.Thread(target=conn.sendall, args=(payload,))
        sender.start()
        while len(got) < len(payload):
            data = conn.recv(1 << 20)
            if not data:
                break
            got += data
        sender.join()
    return bytes(got)


def read_until_closed(conn: socket.socket) -> int:
    """Reads until the peer closes (or resets); returns the bytes read."""
    total = 0
    try:
        while data := conn.recv(1 << 16):
            total += len(data)
    except ConnectionResetError:
        pass
    return total


def closed_without_a_byte(context: ssl.SSLContext, port: int, message: bytes) -> bool:
    """Whether a TLS client sending `message` is closed (or reset) without receiving a byte
    (TLS 1.3: the client's handshake ends first, a refusal comes at its first read)."""
    try:
        with socket.create_connection((HOST, port), timeout=TIMEOUT) as raw:
            with context.wrap_socket(raw) as tls:
                tls.sendall(message)
                return tls.recv(1) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def test_bytes_cross_intact_on_many_connections_at_once(relays):
    node, stand_in, _, _, _ = relays
    payloads = [os.urandom(size) for size in (1, 1000, 5 << 20, 16 << 20)] * 2
    with ThreadPoolExecutor(len(payloads)) as pool:
        echoed = list(pool.map(lambda p: echo_through(stand_in, p), payloads))
    for sent, got in zip(payloads, echoed):
        assert hashlib.sha256(got).digest() == hashlib.sha256(sent).digest(), len(sent)
    assert node.connections == len(payloads)


def test_strangers_are_refused_with_one_line_each_and_reach_no_node(relays, tmp_path):
    node, stand_in, tls_b, (_relay_a, relay_b), key = relays
    with socket.create_connection((HOST, tls_b), timeout=TIMEOUT) as garbage:
        garbage.sendall(os.urandom(4096))
        assert read_until_closed(garbage) < 1 << 16  # a TLS alert at most, then closed
    other_key = str(tmp_path / "other.pem")
    make_job_key(other_key)
    stranger = tls_context(other_key, server=False)
    stranger.verify_mode = ssl.CERT_NONE  # trusts any relay: only relay B's check can stop it
    assert closed_without_a_byte(
        stranger, tls_b, f"{HOST}:{node.port}\n".encode() + os.urandom(100)
    )
    # the job's key, but a node that relay B's plan does not list
    assert closed_without_a_byte(
        tls_context(key, server=False), tls_b, f"{HOST}:{free_port(HOST)}\n".encode()
    )
    assert echo_through(stand_in, b"still serving") == b"still serving"
    time.sleep(0.5)
    errors = stop(relay_b).splitlines()
    assert node.received == len(b"still serving") and node.connections == 1
    refusals = [line for line in errors if "refused a connection from 127.0.0.1:" in line]
    assert len(refusals) == 3, errors
    assert sum("TLS handshake failed" in line for line in refusals) == 2, refusals
    assert sum("which is not a node of this host" in line for line in refusals) == 1, refusals


def test_when_the_node_hangs_up_the_dialling_side_sees_the_end(relays):
    node, stand_in, _, _, _ = relays
    node.hang_up_after = 1
    with socket.create_connection((HOST, stand_in), timeout=TIMEOUT) as conn:
        conn.sendall(b"x")
        assert conn.recv(1) == b"x"
        assert read_until_closed(conn) == 0  # relay B, then relay A, closed their sides


def test_a_relay_says_ready_to_its_starter_at_every_log_level(tmp_path, monkeypatch):
    """The 'ready' line is the launcher's handshake with its relay, not a message: at
    MXKV_LOG_LEVEL=error (mxkv-launch --log-level error) the launcher still gets it
    (relay_setup.start_ready gives up after READY_SECONDS, naming the relay, if not)."""
    key = str(tmp_path / "job.pem")
    make_job_key(key)
    plan_path = tmp_path / "quiet.json"
    plan_path.write_text(RelayPlan(Endpoint(HOST, free_port(HOST)), frozenset(), {}).to_json())
    command = [sys.executable, "-m", "mxkv_hybrid.launch.relay", "--plan", str(plan_path)]
    monkeypatch.setenv("MXKV_LOG_LEVEL", "error")
    relay = start_ready("quiet relay", [*command, "--key", key], "", os.environ)
    end_process_group(relay, grace=0)


def test_bytes_in_the_target_lines_record_reach_the_node(relays):
    """A dialling relay's first bytes may share a TLS record with its target line: relay B
    keeps what follows the line and hands it on first."""
    node, _, tls_b, _, key = relays
    payload = os.urandom(3000)
    with socket.create_connection((HOST, tls_b), timeout=TIMEOUT) as raw:
        with tls_context(key, server=False).wrap_socket(raw) as tls:
            tls.sendall(f"{HOST}:{node.port}\n".encode() + payload)  # one write, one record
            got = bytearray()
            while len(got) < len(payload) and (data := tls.recv(1 << 16)):
                got += data
    assert bytes(got) == payload and node.received == len(payload)


def test_a_python_tls_client_with_the_key_gets_its_pong(relays):
    """The launcher's host is watched by pings from Python's ssl (Relay.watch): the C++ end
    and Python's agree on TLS 1.3 with the job's key."""
    _, _, tls_b, _, key = relays
    with socket.create_connection((HOST, tls_b), timeout=TIMEOUT) as raw:
        with tls_context(key, server=False).wrap_socket(raw) as tls:
            tls.sendall(b"ping\n")
            assert tls.recv(16) == b"pong\n"
            assert tls.version() == "TLSv1.3"


def test_relays_end_on_sigterm_while_they_carry_a_connection(relays):
    """Each connection's thread waits in C++ without the GIL; a relay told to end stops them
    all and exits, and the connection's node side sees it closed."""
    _, stand_in, _, (relay_a, relay_b), _ = relays
    with socket.create_connection((HOST, stand_in), timeout=TIMEOUT) as conn:
        conn.sendall(b"z")
        assert conn.recv(1) == b"z"  # carried through both relays
        for relay in (relay_a, relay_b):
            relay.terminate()
        for relay in (relay_a, relay_b):
            assert relay.wait(timeout=TIMEOUT) == 0
        assert read_until_closed(conn) == 0

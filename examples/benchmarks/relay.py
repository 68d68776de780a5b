"""Throughput of the relay pair that carries ps-lite between hosts (mxkv_hybrid/launch/relay.py)
on loopback, against a direct TCP connection in the same run.

    python examples/benchmarks/relay.py            # writes results/relay.json
    python examples/benchmarks/relay.py --quick

A client sends --megabytes to a sink (which reads and discards, then answers one byte) over
1 and 4 connections at once, either directly or through relay A's stand-in listener, TLS
1.3 to relay B, and on to the sink: both relays are real processes. Each configuration runs
--reps times, in alternating order; the table shows median MB/s (1 MB = 1e6 bytes) and the
relay's share of the direct figure.

It also counts CPU, to say what bounds the relay on this machine: the CPU seconds per MB
that the two relay processes used in the relayed runs (from /proc), the benchmark's own
(client and sink) per MB in the direct runs, and the floor of TLS itself: encrypting and
decrypting in one process through memory BIOs, with the job key's TLS 1.3 cipher, no
socket. With C cores, no relay pair can move more than C / (its CPU per MB + the client's
and sink's) MB/s here (`cpu_bound_mb_per_s`); and no relay pair at all more than C /
(TLS alone + three times the client's and sink's), since the relays' four socket
operations per byte cost at least twice the direct path's two (`best_possible_mb_per_s`).
"""

import argparse
import json
import os
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List

import numpy as np

from mxkv_hybrid.launch.job_key import make_job_key, tls_context
from mxkv_hybrid.launch.processes import free_port
from mxkv_hybrid.ps.node_addresses import Endpoint, RelayPlan, StandIn

HOST = "127.0.0.1"
BLOCK = 4 << 20  # bytes a client send() call hands over


class Sink(socketserver.ThreadingTCPServer):
    """Reads every byte of a connection (`expected` of them), then answers one byte."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, expected: int):
        super().__init__((HOST, 0), _Drain)
        self.expected = expected
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Drain(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        buffer, left = bytearray(BLOCK), self.server.expected
        while left > 0:
            got = self.request.recv_into(buffer)
            if not got:
                return
            left -= got
        self.request.sendall(b"!")


def send(port: int, total: int) -> None:
    payload = memoryview(os.urandom(BLOCK))
    with socket.create_connection((HOST, port)) as conn:
        left = total
        while left > 0:
            conn.sendall(payload[: min(left, BLOCK)])
            left -= min(left, BLOCK)
        assert conn.recv(1) == b"!"


def megabytes_per_second(port: int, per_connection: int, connections: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(lambda _: send(port, per_connection), range(connections)))
    return connections * per_connection / (time.perf_counter() - start) / 1e6


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_counter(path: str, relays: List[subprocess.Popen]) -> Callable[[], float]:
    """What a run of `path` is charged: the relay processes' CPU seconds so far (relayed
    runs), or this process's (direct runs: the client and the sink)."""
    if path == "relay":
        return lambda: sum(cpu_seconds(relay.pid) for relay in relays)
    return time.process_time


def tls_floor_ms_per_mb(key: str, megabytes: int = 200) -> Dict[str, object]:
    """CPU ms per MB to encrypt, and to encrypt and decrypt, through memory BIOs with the
    job key's contexts (the handshake done first): TLS's own work, no socket."""
    server, client = tls_context(key, server=True), tls_context(key, server=False)
    bios = [ssl.MemoryBIO() for _ in range(4)]
    near = client.wrap_bio(bios[0], bios[1], server_hostname=None)
    far = server.wrap_bio(bios[2], bios[3], server_side=True)
    for _ in range(4):  # two flights each way, then the server's session tickets
        for end in (near, far):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                pass
        bios[2].write(bios[1].read())
        bios[0].write(bios[3].read())
    payload, buffer = os.urandom(1_000_000), bytearray(1_000_000)
    start = time.process_time()
    for _ in range(megabytes):
        near.write(payload)
        bios[2].write(bios[1].read())
        got = 0
        while got < len(buffer):
            got += far.read(len(buffer) - got, memoryview(buffer)[got:])
    both = time.process_time() - start
    start = time.process_time()  # (last: what it encrypts is never decrypted)
    for _ in range(megabytes):
        near.write(payload)
        bios[1].read()
    encrypt = time.process_time() - start
    return {
        "cipher": near.cipher()[0],
        "encrypt_ms_per_mb": 1000 * encrypt / megabytes,
        "encrypt_decrypt_ms_per_mb": 1000 * both / megabytes,
    }


def start_relays(directory: str, sink: Sink) -> List[subprocess.Popen]:
    """Relay B (the sink's host) and relay A (a stand-in for the sink); returns them, A's
    stand-in port set as .stand_in on the list's first element."""
    key = os.path.join(directory, "job.pem")
    make_job_key(key)
    target, tls_b, stand_in = Endpoint(HOST, sink.port), free_port(HOST), free_port(HOST)
    plans = {
        "b": RelayPlan(Endpoint(HOST, tls_b), frozenset([target]), {}),
        "a": RelayPlan(
            Endpoint(HOST, free_port(HOST)),
            frozenset(),
            {Endpoint(HOST, stand_in): StandIn(Endpoint(HOST, tls_b), target)},
        ),
    }
    relays = []
    for name, plan in plans.items():
        path = os.path.join(directory, f"{name}.json")
        with open(path, "w") as f:
            f.write(plan.to_json())
        relay = subprocess.Popen(
            [sys.executable, "-m", "mxkv_hybrid.launch.relay", "--plan", path, "--key", key],
            stderr=subprocess.PIPE,
            text=True,
        )
        if "ready" not in relay.stderr.readline():
            sys.exit(f"relay {name} did not start")
        relays.append(relay)
    relays[-1].stand_in = stand_in
    return relays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=1000, help="sent per configuration")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="200 MB, 3 repetitions")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()
    if args.quick:
        args.megabytes, args.reps = 200, 3
    rows: Dict[str, List[float]] = {}
    cpu: Dict[str, float] = {}  # CPU seconds: the relays' (relayed runs), client and sink (direct)
    moved: Dict[str, float] = {}  # MB moved by those runs
    with tempfile.TemporaryDirectory() as directory:
        for connections in (1, 4):
            per_connection = args.megabytes * 1_000_000 // connections
            sink = Sink(per_connection)
            relays = start_relays(directory, sink)
            ports = {"direct": sink.port, "relay": relays[-1].stand_in}
            try:
                for rep in range(args.reps):
                    for path in ("direct", "relay") if rep % 2 == 0 else ("relay", "direct"):
                        counter = cpu_counter(path, relays)
                        before = counter()
                        rate = megabytes_per_second(ports[path], per_connection, connections)
                        name = "relays" if path == "relay" else "client and sink"
                        cpu[name] = cpu.get(name, 0.0) + counter() - before
                        moved[name] = moved.get(name, 0.0) + args.megabytes
                        rows.setdefault(f"{path} x{connections}", []).append(rate)
                        print(
                            f"{path}, {connections} connection(s), rep {rep}: {rate:.0f} MB/s",
                            flush=True,
                        )
            finally:
                for relay in relays:
                    relay.terminate()
                    relay.wait()
                sink.close()
        floor = tls_floor_ms_per_mb(os.path.join(directory, "job.pem"))
    medians = {name: float(np.median(rates)) for name, rates in rows.items()}
    ms_per_mb = {name: 1000 * cpu[name] / moved[name] for name in cpu}
    cores = len(os.sched_getaffinity(0))
    direct_ms = ms_per_mb["client and sink"]
    bound = 1000 * cores / (ms_per_mb["relays"] + direct_ms)
    best = 1000 * cores / (floor["encrypt_decrypt_ms_per_mb"] + 3 * direct_ms)
    print(f"\n{args.megabytes} MB a run, median of {args.reps}\n")
    print("| connections | direct MB/s | through the relays MB/s | relay / direct |")
    print("|---|---|---|---|")
    for connections in (1, 4):
        direct, relay = medians[f"direct x{connections}"], medians[f"relay x{connections}"]
        print(f"| {connections} | {direct:.0f} | {relay:.0f} | {relay / direct:.2f} |")
    print(
        f"\nCPU ms per MB: the relay pair {ms_per_mb['relays']:.2f}, the client and sink "
        f"{ms_per_mb['client and sink']:.2f}; TLS alone ({floor['cipher']}): encrypt "
        f"{floor['encrypt_ms_per_mb']:.2f}, encrypt and decrypt "
        f"{floor['encrypt_decrypt_ms_per_mb']:.2f}"
    )
    print(f"{cores} cores bound these relays to {bound:.0f} MB/s, and any relay pair to {best:.0f}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "relay.json"), "w") as f:
        json.dump(
            {
                "megabytes": args.megabytes,
                "reps": args.reps,
                "runs": rows,
                "medians_mb_per_s": medians,
                "cpu_ms_per_mb": ms_per_mb,
                "tls_floor": floor,
                "cores": cores,
                "cpu_bound_mb_per_s": bound,
                "best_possible_mb_per_s": best,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()

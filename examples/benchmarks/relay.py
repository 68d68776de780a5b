"""Throughput of the relay pair that carries ps-lite between hosts (mxkv_hybrid/launch/relay.py)
on loopback, against a direct TCP connection in the same run.

    python examples/benchmarks/relay.py            # writes results/relay.json
    python examples/benchmarks/relay.py --quick

A client sends --megabytes to a sink (which reads and discards, then answers one byte) over
1 and 4 connections at once, either directly or through relay A's stand-in listener, TLS
1.3 to relay B, and on to the sink: both relays are real processes. Each configuration runs
--reps times, in alternating order; the table shows median MB/s (1 MB = 1e6 bytes) and the
relay's share of the direct figure.
"""

import argparse
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

import numpy as np

from mxkv_hybrid.launch.job_key import make_job_key
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
    with tempfile.TemporaryDirectory() as directory:
        for connections in (1, 4):
            per_connection = args.megabytes * 1_000_000 // connections
            sink = Sink(per_connection)
            relays = start_relays(directory, sink)
            ports = {"direct": sink.port, "relay": relays[-1].stand_in}
            try:
                for rep in range(args.reps):
                    for path in ("direct", "relay") if rep % 2 == 0 else ("relay", "direct"):
                        rate = megabytes_per_second(ports[path], per_connection, connections)
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
    medians = {name: float(np.median(rates)) for name, rates in rows.items()}
    print(f"\n{args.megabytes} MB a run, median of {args.reps}\n")
    print("| connections | direct MB/s | through the relays MB/s | relay / direct |")
    print("|---|---|---|---|")
    for connections in (1, 4):
        direct, relay = medians[f"direct x{connections}"], medians[f"relay x{connections}"]
        print(f"| {connections} | {direct:.0f} | {relay:.0f} | {relay / direct:.2f} |")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "relay.json"), "w") as f:
        json.dump(
            {
                "megabytes": args.megabytes,
                "reps": args.reps,
                "runs": rows,
                "medians_mb_per_s": medians,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()

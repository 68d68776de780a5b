"""Throughput of the relay pair that carries ps-lite between hosts (mxkv_hybrid/launch/relay.py)
on loopback, against a direct TCP connection in the same run.

    python examples/benchmarks/relay.py            # writes results/relay.json
    python examples/benchmarks/relay.py --quick
    python examples/benchmarks/relay.py --baseline before=/tmp/old  # another checkout's relays too

A client sends --megabytes to a sink (which reads and discards, then answers one byte) over
1 and 4 connections at once, either directly or through relay A's stand-in listener, TLS
1.3 to relay B, and on to the sink: both relays are real processes. Each configuration runs
--reps times, in alternating order; the table shows median MB/s (1 MB = 1e6 bytes) and the
relay's share of the direct figure.

It also counts CPU, to say what bounds the relay on this machine: the CPU seconds per MB
that the two relay processes used in the relayed runs (from /proc), the benchmark's own
(client and sink) per MB in the direct runs, and two floors of the cryptography: TLS in
one process through Python's memory BIOs, no socket (`tls_floor`, in Python's preferred
suite), and the AEAD alone on 16 KiB records, TLS's largest, in the suite the relays
negotiate, from `openssl speed` (`aead_floor`). With C cores, no relay pair can move more
than C / (its CPU per MB + the client's and sink's) MB/s here (`cpu_bound_mb_per_s`); and no
relay pair at all more than C / (the AEAD floor + three times the client's and sink's),
since the relays' four socket operations per byte cost at least twice the direct path's two
(`best_possible_mb_per_s`).
"""

import argparse
import json
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional

import numpy as np

from mxkv_hybrid.launch.job_key import make_job_key, tls_context
from mxkv_hybrid.launch.processes import free_port
from mxkv_hybrid.ps.node_addresses import Endpoint, RelayPlan, StandIn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from process_cpu import cpu_seconds

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


def cpu_counter(relays: List[subprocess.Popen]) -> Callable[[], float]:
    """What a run is charged: its relay processes' CPU seconds so far (relayed runs), or this
    process's (direct runs, no relays: the client and the sink)."""
    if relays:
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


def relay_cipher(key: str, relay_port: int) -> str:
    """The TLS 1.3 suite a relay negotiates, asked as another relay asks (a ping)."""
    with socket.create_connection((HOST, relay_port)) as raw:
        with tls_context(key, server=False).wrap_socket(raw) as tls:
            tls.sendall(b"ping\n")
            tls.recv(16)
            return tls.cipher()[0]


def aead_floor_ms_per_mb(suite: str) -> Optional[Dict[str, object]]:
    """CPU ms per MB to encrypt, and to encrypt and decrypt, 16 KiB records with `suite`'s
    AEAD, from `openssl speed` (the OpenSSL the relays link): the cryptography without TLS.
    None where the openssl command is not installed."""
    if shutil.which("openssl") is None:
        print("no openssl command: the bound for any relay pair uses TLS through memory BIOs")
        return None
    cipher = {"TLS_AES_128_GCM_SHA256": "aes-128-gcm", "TLS_AES_256_GCM_SHA384": "aes-256-gcm"}
    ms_per_mb = {}
    for way, flags in (("encrypt", []), ("decrypt", ["-decrypt"])):
        command = ["openssl", "speed", "-seconds", "2", *flags, "-evp", cipher[suite], "-bytes"]
        printed = subprocess.run(
            [*command, "16384"], capture_output=True, text=True, check=True
        ).stdout
        kilobytes_per_s = float(printed.strip().splitlines()[-1].split()[-1].rstrip("k"))
        ms_per_mb[way] = 1e6 / kilobytes_per_s
    return {
        "cipher": suite,
        "encrypt_ms_per_mb": ms_per_mb["encrypt"],
        "encrypt_decrypt_ms_per_mb": ms_per_mb["encrypt"] + ms_per_mb["decrypt"],
    }


def start_relays(key: str, sink: Sink, tree: Optional[str] = None) -> List[subprocess.Popen]:
    """Relay B (the sink's host) and relay A (a stand-in for the sink), holding `key`, from
    this package or the checkout `tree`; returns [B, A], with B's TLS port as B.tls and A's
    stand-in port as A.stand_in."""
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
        handle, path = tempfile.mkstemp(suffix=f"-{name}.json", dir=os.path.dirname(key))
        with os.fdopen(handle, "w") as f:
            f.write(plan.to_json())
        relay = subprocess.Popen(
            [sys.executable, "-m", "mxkv_hybrid.launch.relay", "--plan", path, "--key", key],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": tree} if tree else None,
            cwd=tree,  # (python -m puts the working directory first on sys.path)
        )
        if "ready" not in relay.stderr.readline():
            sys.exit(f"relay {name} did not start")
        relays.append(relay)
    relays[0].tls, relays[-1].stand_in = tls_b, stand_in
    return relays


def plot(result: dict, path: str) -> None:
    """Left: MB/s by path and connections; right: CPU ms per MB beside the two floors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from figure_legend import legend_below

    ways = list(dict.fromkeys(name.rsplit(" x", 1)[0] for name in result["medians_mb_per_s"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(ways)
    for i, way in enumerate(ways):
        rates = [result["medians_mb_per_s"][f"{way} x{c}"] for c in (1, 4)]
        left.bar([c + i * width for c in range(2)], rates, width, label=way)
    left.axhline(
        result["best_possible_mb_per_s"],
        color="k",
        ls="--",
        label="best possible for any relay pair here",
    )
    left.set_xticks([c + width * (len(ways) - 1) / 2 for c in range(2)], ["1", "4"])
    left.set_xlabel("connections at once")
    left.set_ylabel("MB/s (median)")
    floors = {"TLS, Python": result["tls_floor"], "AEAD alone": result["aead_floor"]}
    costs = {
        **result["cpu_ms_per_mb"],
        **{
            f"{name} ({floor['cipher']})": floor["encrypt_decrypt_ms_per_mb"]
            for name, floor in floors.items()
            if floor
        },
    }
    right.barh(list(costs), list(costs.values()), color="grey")
    right.set_xlabel("CPU ms per MB")
    right.invert_yaxis()
    legend_below(fig, [left], len(ways) + 1)
    fig.savefig(path, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=1000, help="sent per configuration")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="200 MB, 3 repetitions")
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="also run the relays of the checkout DIR (e.g. an older commit's), as 'relay NAME'",
    )
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()
    if args.quick:
        args.megabytes, args.reps = 200, 3
    trees = dict(baseline.split("=", 1) for baseline in args.baseline)
    rows: Dict[str, List[float]] = {}
    cpu: Dict[str, float] = {}  # CPU seconds: the relays' (relayed runs), client and sink (direct)
    moved: Dict[str, float] = {}  # MB moved by those runs
    with tempfile.TemporaryDirectory() as directory:
        key = os.path.join(directory, "job.pem")
        make_job_key(key)
        for connections in (1, 4):
            per_connection = args.megabytes * 1_000_000 // connections
            sink = Sink(per_connection)
            relays = {"relay": start_relays(key, sink)}
            for name, tree in trees.items():
                relays[f"relay {name}"] = start_relays(key, sink, tree)
            ports = {"direct": sink.port, **{path: r[-1].stand_in for path, r in relays.items()}}
            suite = relay_cipher(key, relays["relay"][0].tls)
            try:
                for rep in range(args.reps):
                    for path in list(ports)[:: 1 if rep % 2 == 0 else -1]:
                        counter = cpu_counter(relays.get(path, []))
                        before = counter()
                        rate = megabytes_per_second(ports[path], per_connection, connections)
                        name = (
                            path.replace("relay", "relays") if path in relays else "client and sink"
                        )
                        cpu[name] = cpu.get(name, 0.0) + counter() - before
                        moved[name] = moved.get(name, 0.0) + args.megabytes
                        rows.setdefault(f"{path} x{connections}", []).append(rate)
                        print(
                            f"{path}, {connections} connection(s), rep {rep}: {rate:.0f} MB/s",
                            flush=True,
                        )
            finally:
                for relay in (r for pair in relays.values() for r in pair):
                    relay.terminate()
                    relay.wait()
                sink.close()
        floor = tls_floor_ms_per_mb(key)
    aead = aead_floor_ms_per_mb(suite)
    medians = {name: float(np.median(rates)) for name, rates in rows.items()}
    ms_per_mb = {name: 1000 * cpu[name] / moved[name] for name in cpu}
    cores = len(os.sched_getaffinity(0))
    direct_ms = ms_per_mb["client and sink"]
    bound = 1000 * cores / (ms_per_mb["relays"] + direct_ms)
    cryptography = aead or floor  # the AEAD alone, or TLS through memory BIOs without it
    best = 1000 * cores / (cryptography["encrypt_decrypt_ms_per_mb"] + 3 * direct_ms)
    print(f"\n{args.megabytes} MB a run, median of {args.reps}\n")
    others = [f"relay {name}" for name in trees]
    print(
        "| connections | direct MB/s | through the relays MB/s | relay / direct |"
        + "".join(f" {path} MB/s |" for path in others)
    )
    print("|---|---|---|---|" + "---|" * len(others))
    for connections in (1, 4):
        direct, relay = medians[f"direct x{connections}"], medians[f"relay x{connections}"]
        print(
            f"| {connections} | {direct:.0f} | {relay:.0f} | {relay / direct:.2f} |"
            + "".join(f" {medians[f'{path} x{connections}']:.0f} |" for path in others)
        )
    print(
        f"\nCPU ms per MB: the relay pair {ms_per_mb['relays']:.2f}"
        + "".join(f", {path}'s {ms_per_mb[path.replace('relay', 'relays')]:.2f}" for path in others)
        + f", the client and sink {ms_per_mb['client and sink']:.2f}; TLS alone "
        f"({floor['cipher']}): encrypt "
        f"{floor['encrypt_ms_per_mb']:.2f}, encrypt and decrypt "
        f"{floor['encrypt_decrypt_ms_per_mb']:.2f}"
        + (
            f"; the AEAD alone ({aead['cipher']}, the relays'): encrypt and decrypt "
            f"{aead['encrypt_decrypt_ms_per_mb']:.2f}"
            if aead
            else ""
        )
    )
    print(f"{cores} cores bound these relays to {bound:.0f} MB/s, and any relay pair to {best:.0f}")
    result = {
        "megabytes": args.megabytes,
        "baselines": trees,
        "reps": args.reps,
        "runs": rows,
        "medians_mb_per_s": medians,
        "cpu_ms_per_mb": ms_per_mb,
        "tls_floor": floor,
        "aead_floor": aead,
        "cores": cores,
        "cpu_bound_mb_per_s": bound,
        "best_possible_mb_per_s": best,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "relay.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, "relay.png"))


if __name__ == "__main__":
    main()

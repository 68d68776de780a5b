"""`mxkv-launch --check` on several hosts: whether every host reaches this machine (at the
scheduler's address) and every other host, checked by TCP before any MPI job starts (a
host that cannot be reached would hang MPI_Init on all the others).

One probe per host (this file run as a script: no MXNet, no MPI), started through mpiexec
as the ranks are, listens on a port of its own and tells the launcher where; once every
probe has called (or REGISTER_SECONDS have passed) the launcher sends each one the others'
addresses, each tries them all at once and reports back. A host whose probe never calls
cannot reach this machine; every failed connection is named with both hosts and the
address. The whole check takes at most REGISTER_SECONDS + CONNECT_SECONDS + a second.
"""

import secrets
import select
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

try:
    from .control.channel import receive, send, token_matches
except ImportError:  # run as a script (each host's probe): the channel by path
    from control.channel import receive, send, token_matches  # type: ignore[import-not-found,no-redef]

REGISTER_SECONDS = 5.0  # every probe calls the launcher within this, or its host is named
CONNECT_SECONDS = 3.0  # one TCP connection attempt


@dataclass(frozen=True)
class Listening:
    """Where one host's probe listens: its host name, the address its host reaches this
    machine from, and the port."""

    host: str
    address: str
    port: int


class ReachCheck:
    """The launcher's end: waits for the probes of `hosts`, then collects what each one
    reached. `problems()` names what was not reached (none: every host reached every other)."""

    def __init__(self, address: str, hosts: List[str]):
        self.hosts = hosts
        self.token = secrets.token_hex(8)
        self._listener = socket.create_server((address, 0))
        self.address = f"{self.token}@{address}:{self._listener.getsockname()[1]}"
        self._probes: Dict[str, Listening] = {}
        self._connections: Dict[str, socket.socket] = {}
        self._failures: List[str] = []
        self._reported: set = set()

    def run(self) -> None:
        """Registers the probes, sends them their targets, collects their reports."""
        self._register()
        everyone = [asdict(probe) for probe in self._probes.values()]
        for host, connection in self._connections.items():
            targets = [probe for probe in everyone if probe["host"] != host]
            send(connection, {"targets": targets})
        self._collect()
        for connection in self._connections.values():
            connection.close()
        self._listener.close()

    def problems(self) -> List[str]:
        """One line per host whose probe never called; if none, per host that did not
        report and per failed connection."""
        address = self.address.rpartition("@")[2]
        missing = [host for host in self.hosts if host not in self._probes]
        lines = [
            f"{host}: its probe never called this machine at {address} within "
            f"{REGISTER_SECONDS:g} s: {host} cannot reach it (cut off, a firewall, or no "
            "route from there to this address: --ps-host chooses another)"
            for host in missing
        ]
        if missing:  # mpiexec ends every probe when one host's cannot start: nothing more
            return lines
        lines += [
            f"{host}: its probe did not report what it reached"
            for host in self._probes
            if host not in self._reported
        ]
        return lines + self._failures

    def missing(self) -> bool:
        """Whether some host's probe never called (mpiexec's output then says why)."""
        return set(self._probes) != set(self.hosts)

    def _register(self) -> None:
        deadline = time.monotonic() + REGISTER_SECONDS
        while len(self._probes) < len(self.hosts) and time.monotonic() < deadline:
            if not select.select([self._listener], [], [], deadline - time.monotonic())[0]:
                break
            connection, _ = self._listener.accept()
            connection.settimeout(CONNECT_SECONDS)
            try:
                hello = receive(connection.makefile("rb")) or {}
            except (OSError, ValueError):
                connection.close()
                continue
            if not token_matches(hello, self.token) or hello.get("host") not in self.hosts:
                connection.close()
                continue
            probe = Listening(hello["host"], hello["address"], int(hello["port"]))
            self._probes[probe.host] = probe
            self._connections[probe.host] = connection

    def _collect(self) -> None:
        deadline = time.monotonic() + CONNECT_SECONDS + 1.0
        readers = {
            connection: connection.makefile("rb") for connection in self._connections.values()
        }
        hosts = {connection: host for host, connection in self._connections.items()}
        waiting = set(readers)
        while waiting and time.monotonic() < deadline:
            ready = select.select(list(waiting), [], [], deadline - time.monotonic())[0]
            for connection in ready:
                waiting.discard(connection)
                try:
                    report = receive(readers[connection])
                except (OSError, ValueError):
                    continue
                if report is None:
                    continue
                host = hosts[connection]
                self._reported.add(host)
                self._failures += [
                    f"{host} ({self._probes[host].address}) cannot reach "
                    f"{failed['host']} ({failed['address']}:{failed['port']}): "
                    f"{failed['error']}"
                    for failed in report["failed"]
                ]


def probe_command(check: ReachCheck) -> List[str]:
    """The program each host runs (after mpiexec's options)."""
    return [sys.executable, __file__, check.address]


def _try(target: dict) -> Optional[str]:
    """None if `target` accepts a TCP connection within CONNECT_SECONDS, else why not."""
    try:
        socket.create_connection(
            (target["address"], target["port"]), timeout=CONNECT_SECONDS
        ).close()
        return None
    except socket.timeout:
        return f"no answer within {CONNECT_SECONDS:g} s"
    except OSError as err:
        return err.strerror or str(err)


def _answer_forever(listener: socket.socket) -> None:
    """Accepts (and closes) every connection: the other hosts' probes trying this one."""
    while True:
        listener.accept()[0].close()


def probe(address: str) -> None:
    """A host's probe: listens, calls the launcher at `address` (TOKEN@HOST:PORT), tries
    every target it is sent, reports the failures, and answers the others until the
    launcher closes the connection."""
    token, _, where = address.rpartition("@")
    host, _, port = where.rpartition(":")
    listener = socket.create_server(("", 0))
    threading.Thread(target=_answer_forever, args=(listener,), daemon=True).start()
    launcher = socket.create_connection((host, int(port)), timeout=REGISTER_SECONDS)
    hello = {
        "token": token,
        "host": socket.gethostname(),
        "address": launcher.getsockname()[0],
        "port": listener.getsockname()[1],
    }
    send(launcher, hello)
    launcher.settimeout(REGISTER_SECONDS + CONNECT_SECONDS + 5.0)
    reader = launcher.makefile("rb")
    targets = (receive(reader) or {})["targets"]
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        errors = list(pool.map(_try, targets))
    failed = [dict(target, error=error) for target, error in zip(targets, errors) if error]
    send(launcher, {"failed": failed})
    reader.readline()  # until the launcher closes: the others may still be trying this host


if __name__ == "__main__":
    probe(sys.argv[1])

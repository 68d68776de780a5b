"""An emulated cluster on one machine: K hosts as network namespaces on a bridge.

    with Cluster(hosts=3, rate_mbit=1000) as cluster:
        cluster.run("h1", ["mxkv-launch", "-H", "h1:2,h2:2,h3:2", ...], env=cluster.environment())
        cluster.cut("h3"); cluster.heal("h3")

Each host hN has its own network namespace, an address 198.18.S.(10+N)/24 in the
benchmarking range 198.18.0.0/15 (S chosen per cluster, so clusters can coexist), a
hostname of its own (a private UTS namespace for every command run there), an
/etc/hosts that names every host (`/etc/netns/<ns>/hosts`), and one link to the bridge
whose rate (`tc ... tbf`, both directions, as a full-duplex NIC) its ranks share.
Hydra reaches the hosts through an ssh stand-in (`environment()`: HYDRA_LAUNCHER=ssh,
HYDRA_LAUNCHER_EXEC) and MPI is forced over TCP (UCX_TLS=tcp,self; otherwise MPICH uses
shared memory between namespaces).

Everything made is written down in a state file first and removed on close(); a guardian
process removes it if the owner dies without closing (SIGKILL included), and every new
cluster first sweeps what owners that died left. Needs root and iproute2
(`unavailable_reason()` says why not).
"""

import argparse
import json
import os
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

STATE_DIR = Path("/run/mxkv-cluster")
NETNS_ETC = Path("/etc/netns")
PREFIX = "198.18"  # 198.18.0.0/15 is reserved for benchmarking (RFC 2544); never another range
FIRST_HOST_OCTET = 10  # host hN is .(10+N)
MTU = 1500
BURST_BYTES = 256 * 1024  # tbf's bucket: enough for the veth's 64 KiB GSO packets at 1000 Mbit/s
BURST = f"{BURST_BYTES // 1024}kb"  # as tc reads it
LATENCY = "50ms"  # how long tbf may queue a packet before dropping it


def unavailable_reason() -> Optional[str]:
    """Why this machine cannot make emulated hosts, or None when it can."""
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces, a bridge, tc)"
    for tool in ("ip", "tc", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"emulated hosts need `{tool}` (iproute2 / util-linux)"
    probe = f"mxkvprobe{os.getpid()}"
    made = subprocess.run(
        ["ip", "netns", "add", probe], capture_output=True, check=False, text=True
    )
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def _ip(*arguments: str, namespace: Optional[str] = None, check: bool = True) -> str:
    command = ["ip", *(["-n", namespace] if namespace else []), *arguments]
    done = subprocess.run(command, capture_output=True, check=False, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Host:
    """One emulated host: its name, namespace, address, interface, and the bridge-side end
    of its link."""

    name: str
    namespace: str
    address: str
    interface: str
    link: str  # the veth end on the bridge (in the root namespace); down = cut


@dataclass
class State:
    """What a cluster made, written before it is made, so that anyone can remove it."""

    cluster_id: str
    owner: int
    subnet: int
    bridge: str
    hosts: List[Host] = field(default_factory=list)
    guardian: Optional[int] = None

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.cluster_id}.json"

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(self)))
        temporary.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> "State":
        data = json.loads(path.read_text())
        data["hosts"] = [Host(**host) for host in data["hosts"]]
        return cls(**data)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def processes_in(namespace: str) -> List[int]:
    """PIDs of the processes running in network namespace `namespace`."""
    done = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, check=False, text=True
    )
    return [int(pid) for pid in done.stdout.split()]


def tear_down(state: State) -> None:
    """Removes everything `state` lists (idempotent): the processes inside the namespaces,
    the namespaces, the links, the bridge, /etc/netns/<ns> and the state file."""
    for _ in range(3):  # a process may fork while the others are killed
        pids = [pid for host in state.hosts for pid in processes_in(host.namespace)]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for host in state.hosts:
        _ip("netns", "del", host.namespace, check=False)
        _ip("link", "del", host.link, check=False)  # the kernel frees a dead ns's veth lazily
        shutil.rmtree(NETNS_ETC / host.namespace, ignore_errors=True)
    _ip("link", "del", state.bridge, check=False)
    state.path.unlink(missing_ok=True)
    (STATE_DIR / f"{state.cluster_id}.ssh").unlink(missing_ok=True)


def sweep() -> List[str]:
    """Tears down the clusters whose owner died without closing them; returns their ids."""
    swept = []
    for path in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []:
        try:
            state = State.load(path)
        except (OSError, ValueError, TypeError):
            continue
        if not _alive(state.owner):
            tear_down(state)
            swept.append(state.cluster_id)
    return swept


def _free_subnet() -> int:
    """A third octet S that no live cluster uses (198.18.S.0/24)."""
    used = set()
    for path in STATE_DIR.glob("*.json") if STATE_DIR.is_dir() else []:
        try:
            used.add(State.load(path).subnet)
        except (OSError, ValueError, TypeError):
            continue
    free = [s for s in range(1, 255) if s not in used]
    if not free:
        raise RuntimeError("every 198.18.S.0/24 subnet is taken by a live emulated cluster")
    return free[secrets.randbelow(len(free))]


SSH_STANDIN = """#!/bin/sh
# ssh stand-in of emulated cluster {cluster_id}: `ssh [options] HOST COMMAND...` runs
# COMMAND in HOST's network namespace, with HOST as its hostname, through sh as ssh would.
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOoopQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
case "$host" in
{cases}
  *) echo "ssh stand-in of emulated cluster {cluster_id}: no host $host" >&2; exit 255 ;;
esac
# its own session, as sshd gives a remote command: ending the launcher does not reach it
exec ip netns exec "$namespace" setsid --wait \\
  unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$name" "$*"
"""


class Cluster:
    """K emulated hosts h1..hK (see the module's docstring). A context manager."""

    def __init__(
        self,
        hosts: int,
        rate_mbit: Optional[float] = None,
        interfaces: Optional[Dict[str, str]] = None,
    ):
        if hosts < 1:
            raise ValueError("an emulated cluster needs at least one host")
        self.size = hosts
        self.rate_mbit = rate_mbit
        self._interfaces = interfaces or {}  # host -> its interface's name (default eth0)
        self.state: Optional[State] = None

    def __enter__(self) -> "Cluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def names(self) -> List[str]:
        return [f"h{i}" for i in range(1, self.size + 1)]

    def host(self, name: str) -> Host:
        assert self.state is not None, "the cluster is not started"
        for host in self.state.hosts:
            if host.name == name or host.address == name:
                return host
        raise KeyError(f"no host {name} in this emulated cluster ({', '.join(self.names)})")

    def address(self, name: str) -> str:
        return self.host(name).address

    def start(self) -> None:
        """Sweeps dead owners' clusters, then makes the bridge and the hosts."""
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        sweep()
        cluster_id = secrets.token_hex(2)
        subnet = _free_subnet()
        self.state = State(cluster_id, os.getpid(), subnet, f"mxb{cluster_id}")
        for i, name in enumerate(self.names, start=1):
            self.state.hosts.append(
                Host(
                    name,
                    f"mxkv-{cluster_id}-{name}",
                    f"{PREFIX}.{subnet}.{FIRST_HOST_OCTET + i}",
                    self._interfaces.get(name, "eth0"),
                    f"mxv{cluster_id}{name}",
                )
            )
        self.state.save()
        self.state.guardian = subprocess.Popen(
            [sys.executable, __file__, "guard", cluster_id],  # as a script: no MXNet import
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        ).pid
        self.state.save()
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        state = self.state
        assert state is not None  # start() wrote it
        _ip("link", "add", state.bridge, "type", "bridge")
        _ip("link", "set", state.bridge, "up")
        hosts_file = "127.0.0.1\tlocalhost\n" + "".join(
            f"{host.address}\t{host.name}\n" for host in state.hosts
        )
        for host in state.hosts:
            _ip("netns", "add", host.namespace)
            _ip(
                "link",
                "add",
                host.link,
                "mtu",
                str(MTU),
                "type",
                "veth",
                "peer",
                "name",
                host.interface,
                "netns",
                host.namespace,
            )
            _ip("link", "set", host.link, "master", state.bridge, "up")
            _ip("link", "set", "lo", "up", namespace=host.namespace)
            _ip(
                "addr", "add", f"{host.address}/24", "dev", host.interface, namespace=host.namespace
            )
            _ip("link", "set", host.interface, "up", namespace=host.namespace)
            etc = NETNS_ETC / host.namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            (etc / "hostname").write_text(host.name + "\n")
            if self.rate_mbit:
                self.shape(host.name, self.rate_mbit)
        cases = "\n".join(
            f"  {host.name}|{host.address}) name={host.name}; namespace={host.namespace} ;;"
            for host in state.hosts
        )
        standin = STATE_DIR / f"{state.cluster_id}.ssh"
        standin.write_text(SSH_STANDIN.format(cluster_id=state.cluster_id, cases=cases))
        standin.chmod(0o755)

    def close(self) -> None:
        """Removes everything, ends the guardian."""
        if self.state is None:
            return
        tear_down(self.state)
        if self.state.guardian:
            try:
                os.kill(self.state.guardian, signal.SIGKILL)
                os.waitpid(self.state.guardian, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.state = None

    def shape(self, name: str, rate_mbit: float) -> None:
        """Limits host `name`'s link to `rate_mbit` in each direction (its egress inside the
        namespace, its ingress as the bridge side's egress)."""
        host = self.host(name)
        for device, namespace in ((host.interface, host.namespace), (host.link, None)):
            command = [
                "tc",
                *(["-n", namespace] if namespace else []),
                "qdisc",
                "replace",
                "dev",
                device,
                "root",
                "tbf",
                "rate",
                f"{rate_mbit:g}mbit",
                "burst",
                BURST,
                "latency",
                LATENCY,
            ]
            done = subprocess.run(command, capture_output=True, check=False, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")

    def links(self) -> Dict[str, object]:
        """How every host's link is made, as a results file records it."""
        return {
            "made_by": "mxkv_hybrid.testing.cluster",
            "rate_mbit": self.rate_mbit,
            "qdisc": "tbf",
            "burst": BURST,
            "latency": LATENCY,
            "mtu": MTU,
            "directions": "both: the host's egress (its veth in its namespace) and its "
            "ingress (the bridge side's egress), each at the rate",
            "topology": "one bridge in the root namespace, one veth pair per host",
        }

    def cut(self, name: str) -> None:
        """Cuts host `name` off the others (its link's bridge end goes down)."""
        _ip("link", "set", self.host(name).link, "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self.host(name).link, "up")

    def bytes_sent(self, name: str) -> int:
        """Bytes host `name` has sent over its link (the bridge end's received bytes)."""
        return int(Path(f"/sys/class/net/{self.host(name).link}/statistics/rx_bytes").read_text())

    @property
    def ssh(self) -> str:
        """The ssh stand-in's path."""
        assert self.state is not None, "the cluster is not started"
        return str(STATE_DIR / f"{self.state.cluster_id}.ssh")

    def environment(self) -> Dict[str, str]:
        """What a launcher on one of the hosts needs to start ranks on the others."""
        return {"HYDRA_LAUNCHER": "ssh", "HYDRA_LAUNCHER_EXEC": self.ssh, "UCX_TLS": "tcp,self"}

    def command(self, name: str, argv: Sequence[str]) -> List[str]:
        """`argv` as run on host `name` (its namespace, its hostname)."""
        host = self.host(name)
        return [
            "ip",
            "netns",
            "exec",
            host.namespace,
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            host.name,
            *argv,
        ]

    def run(
        self, name: str, argv: Sequence[str], env: Optional[Dict[str, str]] = None, **popen
    ) -> subprocess.Popen:
        """Starts `argv` on host `name` with os.environ, this cluster's environment() and
        `env`; Popen's other arguments pass through."""
        full = dict(os.environ, **self.environment(), **(env or {}))
        return subprocess.Popen(self.command(name, argv), env=full, **popen)

    def processes(self, name: Optional[str] = None) -> List[int]:
        """PIDs running on host `name` (default: on every host)."""
        names = [name] if name else self.names
        return [pid for n in names for pid in processes_in(self.host(n).namespace)]


def _guard(cluster_id: str) -> None:
    """Waits for the owner of cluster `cluster_id` to die, then tears the cluster down."""
    path = STATE_DIR / f"{cluster_id}.json"
    state = State.load(path)
    try:
        select.select([os.pidfd_open(state.owner)], [], [])
    except ProcessLookupError:
        pass  # it died before the guardian started
    if path.exists():
        tear_down(State.load(path))


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mxkv_hybrid.testing.cluster",
        description="Emulated hosts on this machine (network namespaces; needs root).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser(
        "up", help="make a cluster, print how to use it, hold it until Ctrl-C, then remove it"
    )
    up.add_argument("hosts", type=int, help="how many hosts (h1..hK)")
    up.add_argument("--rate-mbit", type=float, help="each host's link rate, both directions")
    commands.add_parser("sweep", help="remove clusters whose owner died")
    guard = commands.add_parser("guard", help=argparse.SUPPRESS)
    guard.add_argument("cluster_id")
    args = parser.parse_args(argv)
    if args.command == "guard":
        _guard(args.cluster_id)
    elif args.command == "sweep":
        print(f"swept: {', '.join(sweep()) or 'nothing'}")
    else:
        with Cluster(args.hosts, args.rate_mbit) as cluster:
            assert cluster.state is not None  # started
            environment = " ".join(
                f"{k}={shlex.quote(v)}" for k, v in cluster.environment().items()
            )
            print("\n".join(f"{h.name}: {h.address} ({h.namespace})" for h in cluster.state.hosts))
            print(
                f"run on h1:\n    {shlex.join(cluster.command('h1', ['bash']))}\n"
                f"and there:\n    {environment} mxkv-launch -H "
                f"{','.join(n + ':2' for n in cluster.names)} -n {2 * cluster.size} -- ...\n"
                "Ctrl-C removes the cluster",
                flush=True,
            )
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass


if __name__ == "__main__":
    main()

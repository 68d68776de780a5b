"""Where every ps-lite node of a job listens when relays carry ps-lite between hosts
(docs/architecture/ps-lite-wiring.md, section 6), and each host's relay plan.

Host h (0: the scheduler's) gets the loopback address 127.77.1.(200 - h): ps-lite numbers
nodes by host name descending (then port), so host 0's nodes come first, and the last
octet keeps three digits, so string order is number order. Every node listens on its
host's address at a port of its own; every host's relay accepts the other relays on the
host's network address and stands in, on its loopback, for every other host's nodes.
The table travels to the ranks and servers in MXKV_PS_NODES (JSON)."""

import json
import socket
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Tuple

MAX_HOSTS = 100  # 127.77.1.200 down to .101


def loopback_address(host: int) -> str:
    """Host `host`'s address for its ps-lite nodes."""
    if not 0 <= host < MAX_HOSTS:
        raise ValueError(f"host {host}: relays number at most {MAX_HOSTS} hosts")
    return f"127.77.1.{200 - host}"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> "Endpoint":
        host, _, port = text.rpartition(":")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def check_free(node: Endpoint, what: str) -> None:
    """Raises OSError naming `what` unless `node` can be bound here now: ps-lite takes a
    random port without a word when its PORT is taken, and the relays, which know only the
    planned one, would never reach it (the job would wait until MXKV_PS_TIMEOUT)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as zmq binds
        try:
            probe.bind((node.host, node.port))
        except OSError as err:
            raise OSError(
                err.errno,
                f"{what} must listen for ps-lite at {node}, as mxkv-launch "
                f"planned (MXKV_PS_NODES), and that port is taken here "
                f"({err.strerror}): ps-lite would take another port without a word, "
                "which the other hosts' relays never reach. Free the port, or start "
                "the job again (the launcher draws other ports)",
            ) from None


@dataclass(frozen=True)
class StandIn:
    relay: Endpoint  # the relay of the target's host
    target: Endpoint  # the node there


@dataclass(frozen=True)
class RelayPlan:
    tls: Endpoint  # where this relay accepts the other relays
    local: FrozenSet[Endpoint]  # the nodes of this host that other hosts may reach
    stand_ins: Dict[Endpoint, StandIn]  # this host's listeners for the other hosts' nodes

    @classmethod
    def from_json(cls, text: str) -> "RelayPlan":
        plan = json.loads(text)
        return cls(
            Endpoint.parse(plan["tls"]),
            frozenset(Endpoint.parse(e) for e in plan.get("local", [])),
            {
                Endpoint.parse(listen): StandIn(
                    Endpoint.parse(s["relay"]), Endpoint.parse(s["target"])
                )
                for listen, s in plan.get("stand_ins", {}).items()
            },
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "tls": str(self.tls),
                "local": sorted(map(str, self.local)),
                "stand_ins": {
                    str(k): {"relay": str(s.relay), "target": str(s.target)}
                    for k, s in self.stand_ins.items()
                },
            }
        )


@dataclass(frozen=True)
class PsNodes:
    """A job's ps-lite nodes: `hosts` are the hosts' network addresses (the scheduler's
    first), each node a (host index, port) pair."""

    hosts: Tuple[str, ...]
    relay_port: int
    scheduler: Tuple[int, int]
    servers: Tuple[Tuple[int, int], ...]
    leaders: Tuple[Tuple[int, int], ...]  # by group
    # by group, the ports of its restarts (a group job started again): a restarted leader
    # must not take its predecessor's address, where the other nodes' connections still
    # hold messages for the dead one (measured: the restarted leader crashed on them)
    restart_ports: Tuple[Tuple[int, ...], ...] = ()
    relay_ports: Tuple[int, ...] = ()  # by host, where they differ (a served job's groups)

    def endpoint(self, node: Tuple[int, int]) -> Endpoint:
        return Endpoint(loopback_address(node[0]), node[1])

    def leader(self, group: int, start: int = 0) -> Endpoint:
        """Group `group`'s leader at its `start`-th start (0: the first; then restarts)."""
        host, port = self.leaders[group]
        if start == 0:
            return self.endpoint((host, port))
        spares = self.restart_ports[group] if group < len(self.restart_ports) else ()
        if start > len(spares):
            raise ValueError(
                f"group {group}'s start {start}: the table has ports for {len(spares)} restart(s)"
            )
        return self.endpoint((host, spares[start - 1]))

    def nodes_on(self, host: int) -> List[Endpoint]:
        restarted = [
            (leader[0], port)
            for leader, ports in zip(self.leaders, self.restart_ports)
            for port in ports
        ]
        return [
            self.endpoint(node)
            for node in (self.scheduler, *self.servers, *self.leaders, *restarted)
            if node[0] == host
        ]

    def relay_of(self, host: int) -> Endpoint:
        """Where host `host`'s relay accepts the others."""
        port = self.relay_ports[host] if self.relay_ports else self.relay_port
        return Endpoint(self.hosts[host], port)

    def relay_plan(self, host: int) -> RelayPlan:
        """Host `host`'s relay: its own nodes reachable, a stand-in for every other host's.
        Hosts at one address (a served job's groups joined from one machine, or from the
        serving one) share a machine's loopback: they reach each other's nodes there, and
        only the first of them stands in for the nodes elsewhere."""
        stand_ins = {}
        if self.hosts.index(self.hosts[host]) != host:  # another relay here stands in
            return RelayPlan(self.relay_of(host), frozenset(self.nodes_on(host)), {})
        for other in range(len(self.hosts)):
            if self.hosts[other] != self.hosts[host]:
                relay = self.relay_of(other)
                stand_ins.update({node: StandIn(relay, node) for node in self.nodes_on(other)})
        return RelayPlan(self.relay_of(host), frozenset(self.nodes_on(host)), stand_ins)

    def to_json(self) -> str:
        return json.dumps(
            {
                "hosts": list(self.hosts),
                "relay_port": self.relay_port,
                "scheduler": list(self.scheduler),
                "servers": [list(n) for n in self.servers],
                "leaders": [list(n) for n in self.leaders],
                "restart_ports": [list(p) for p in self.restart_ports],
                "relay_ports": list(self.relay_ports),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> "PsNodes":
        table = json.loads(text)
        return cls(
            tuple(table["hosts"]),
            table["relay_port"],
            tuple(table["scheduler"]),
            tuple(tuple(n) for n in table["servers"]),
            tuple(tuple(n) for n in table["leaders"]),
            tuple(tuple(p) for p in table.get("restart_ports", [])),
            tuple(table.get("relay_ports", [])),
        )

"""The relays of a served job (`--serve` on a `--ps-host` other than loopback, and each
`--join`): ps-lite listens on loopback on every host, and its connections between the
serving host and each joined group's travel through the hosts' relays (launch/relay.py),
keyed by the job's token: every launcher that holds the token makes the same key
(job_key.job_key_text), which never crosses the network.

The serving launcher plans its own nodes when it starts the servers (host 0: the scheduler
and the servers) and each group's leader once every group has joined: group g is host
g + 1 (two groups from one machine are two hosts with two relays), at the address its
launcher reached the serving one from and the relay port it chose there (`JoinerRelay`,
told in its hello)."""

import random
import socket
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

from ..network import is_loopback
from ..ps.node_addresses import PsNodes, loopback_address
from .job_key import job_key_text
from .processes import Node, end_process_group, free_port
from .relay_setup import PORTS, relay_command, start_ready


def relays_wanted(ps_host: str, trusted_network: bool) -> bool:
    """Whether a served job puts ps-lite behind relays: a --ps-host the network reaches."""
    return not trusted_network and not is_loopback(ps_host)


def plan_serving_nodes(ps_host: str, num_servers: int) -> PsNodes:
    """The serving host's part of the table: its relay, the scheduler and the servers."""
    here = loopback_address(0)
    return PsNodes(
        hosts=(ps_host,),
        relay_port=free_port(ps_host),
        scheduler=(0, free_port(here)),
        servers=tuple((0, free_port(here)) for _ in range(num_servers)),
        leaders=(),
    )


@dataclass(frozen=True)
class JoinerRelay:
    """Where a joining group's relay will listen (its hello), and how many restarts its
    leader needs ports for."""

    address: str
    port: int
    restarts: int

    @classmethod
    def choose(cls, connection: socket.socket, restarts: int) -> "JoinerRelay":
        """On the address this launcher reaches the serving one from."""
        address = connection.getsockname()[0]
        return cls(address, free_port(address), restarts)


def whole_table(serving: PsNodes, groups: Sequence[JoinerRelay]) -> PsNodes:
    """The served job's table once every group has joined (group g: host g + 1)."""
    ports = iter(random.Random().sample(range(*PORTS), sum(1 + group.restarts for group in groups)))
    return replace(
        serving,
        hosts=(serving.hosts[0], *(g.address for g in groups)),
        relay_ports=(serving.relay_port, *(g.port for g in groups)),
        leaders=tuple((1 + g, next(ports)) for g in range(len(groups))),
        restart_ports=tuple(tuple(next(ports) for _ in range(group.restarts)) for group in groups),
    )


class HostRelay:
    """This launcher's relay for one host of a served job's table, started again with each
    new table (a job that regroups)."""

    def __init__(self, token: str, environ: Mapping[str, str]):
        self._token, self._environ = token, environ
        self.node: Optional[Node] = None

    def start(self, table: PsNodes, host: int) -> Node:
        self.close()
        name = "relay of the serving host" if host == 0 else f"relay of group {host - 1}"
        key_text = job_key_text(secret=self._token)[0]
        command = relay_command(table.relay_plan(host).to_json())
        process = start_ready(name, command, key_text, self._environ)
        self.node = Node(name, process, leaves_by_itself=False)
        return self.node

    def close(self) -> None:
        if self.node is not None:
            end_process_group(self.node.process, grace=0)
            self.node = None

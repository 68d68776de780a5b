"""mxkv-launch's side of the relays (launch/relay.py) for a job whose ranks span hosts: where
every ps-lite node listens (ps/node_addresses.py's table, from the hosts' slots), the job's
key, one relay per host started before any ps-lite node and watched with the servers, and
the variables that place the scheduler, the servers and the group leaders.

Host 0 is this machine (the scheduler's, and the servers'); the others follow in the order
-H / --hostfile names them. Ranks fill the hosts' slots in order, as mpiexec places them.
A group's leader is its first rank: every --group-size-th rank, or each host's first."""

import random
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..config import read_knob
from ..network import is_this_machine
from ..ps.node_addresses import PsNodes, loopback_address
from .control.timing import BEAT_SECONDS
from .job_key import job_key_text
from .processes import Node, end_process_group, free_port, spawn
from .relay import PING, PONG
from .supervisor import say

# where ports are drawn for the nodes of other hosts and the relays, which this machine
# cannot ask for a free one: below Linux's ephemeral range (32768-60999), whose ports the
# hosts' own outgoing connections take (a relay drawn at 43025 found it in use on a host
# of a test that had just run a job there; CI's clean run at d18bb70)
PORTS = (20000, 32768)
READY_SECONDS = 60.0


def leader_ranks(placed: Sequence[str], group_size: int) -> List[int]:
    """The world ranks that lead the groups of one MPI job, in group order
    (comm/topology.groups): every `group_size`-th rank, or each host's first."""
    if group_size:
        return list(range(0, len(placed), group_size))
    firsts: Dict[str, int] = {}
    for rank, host in enumerate(placed):
        firsts.setdefault(host, rank)
    return sorted(firsts.values())


def one_job_leader_hosts(
    slots: Sequence[Tuple[str, int]], num_ranks: int, group_size: int
) -> List[str]:
    """Where each group's leader runs in one MPI job whose ranks fill `slots` in order."""
    placed = [host for host, count in slots for _ in range(count)]
    placed = [placed[rank % len(placed)] for rank in range(num_ranks)]
    return [placed[rank] for rank in leader_ranks(placed, group_size)]


def plan_nodes(
    ps_host: str, leader_hosts: Sequence[str], num_servers: int, restarts: int = 0
) -> Tuple[PsNodes, List[str]]:
    """The job's table and its hosts' names (index 0: this machine, named `ps_host`; then
    the other hosts that run a group leader, in group order); `restarts`: ports for each
    group's restarts (group jobs' --restarts)."""
    names = [ps_host]
    index: Dict[str, int] = {}
    for host in leader_hosts:
        if host not in index:
            index[host] = 0 if is_this_machine(host) else len(names)
            if index[host]:
                names.append(host)
    remote_ports = iter(random.Random().sample(range(*PORTS), len(leader_hosts) * (1 + restarts)))
    here = loopback_address(0)

    def port_on(host: int) -> int:
        return free_port(here) if host == 0 else next(remote_ports)

    table = PsNodes(
        hosts=tuple(names),
        relay_port=free_port(ps_host),
        scheduler=(0, free_port(here)),
        servers=tuple((0, free_port(here)) for _ in range(num_servers)),
        leaders=tuple((index[h], port_on(index[h])) for h in leader_hosts),
        restart_ports=tuple(
            tuple(port_on(index[h]) for _ in range(restarts)) for h in leader_hosts
        ),
    )
    return table, names


def node_environment(table: PsNodes) -> Dict[str, str]:
    """What every process of the job gets: the scheduler's loopback address, the table."""
    scheduler = table.endpoint(table.scheduler)
    return {
        "DMLC_PS_ROOT_URI": scheduler.host,
        "DMLC_PS_ROOT_PORT": str(scheduler.port),
        "MXKV_PS_NODES": table.to_json(),
    }


def server_environment(table: PsNodes, server: int) -> Dict[str, str]:
    where = table.endpoint(table.servers[server])
    return {"DMLC_NODE_HOST": where.host, "PORT": str(where.port)}


ANSWER_SECONDS = 3.0  # for a relay's answer to the launcher's ping
RELAY_RESTARTS = 3  # how often one host's relay that crashed is started again in one job


@dataclass
class RelayNode(Node):
    """A host's relay, which the launcher starts again when it crashed on a live host, and
    for a group restarted on its host (a relay cut off from the job ends itself, status 0)."""

    host_name: str = ""
    owner: Optional["Relays"] = None
    restarts: int = 0  # how often it was started again after a crash
    crashed: Optional[Tuple[int, float]] = None  # its last crash: (status, time.monotonic())
    _handled: Optional[subprocess.Popen] = None  # the process whose exit was handled
    busy: threading.Lock = field(default_factory=threading.Lock)  # held while (re)started

    def note_crash(self) -> bool:
        """Records and names a non-zero exit of this relay's process, once per process
        (a relay cut off from the job ends itself with 0, and its mpiexec here cannot
        hear even that before the link heals). Returns whether this was a new crash."""
        if self.process.returncode in (None, 0) or self.process is self._handled:
            return False
        self._handled = self.process
        self.crashed = (self.process.returncode, time.monotonic())
        return True

    def after_exit(self) -> None:
        """A relay that crashed (note_crash) is started again, in a thread, RELAY_RESTARTS
        times at most; its host's groups may have lost messages (relay_crash)."""
        if not self.busy.acquire(blocking=False):
            return  # being started again already
        assert self.owner is not None
        if not self.note_crash():
            self.busy.release()
            return
        if self.restarts >= RELAY_RESTARTS:
            self.busy.release()
            say(
                f"the {self.name} exited with status {self.process.returncode} again: not "
                f"started again (it was {RELAY_RESTARTS} times)"
            )
            return
        self.restarts += 1
        say(
            f"the {self.name} exited with status {self.process.returncode}; starting it "
            f"again (restart {self.restarts} of {RELAY_RESTARTS})"
        )
        threading.Thread(target=self.owner.restart_crashed, args=(self,), daemon=True).start()


def relay_crash(helpers: Sequence[Node], since: float, host: Optional[str] = None) -> Optional[str]:
    """How the relay among `helpers` (of `host`, or of any host) that crashed after `since`
    (time.monotonic()) ended ('the relay on h2 exited with status -9'), or None: a relay
    that ends mid-connection may lose the ps-lite messages it carried, which ps-lite never
    sends again."""
    for helper in helpers:
        if (
            isinstance(helper, RelayNode)
            and helper.crashed is not None
            and helper.crashed[1] > since
            and host in (None, helper.host_name)
        ):
            return f"the {helper.name} exited with status {helper.crashed[0]}"
    return None


class Relays:
    """The job's key and the relays of every host, started in order (`nodes`: the launcher
    ends them with the servers)."""

    def __init__(self, table: PsNodes, names: List[str], mpiexec: str, environ: Mapping[str, str]):
        self._table, self._names, self._mpiexec = table, names, mpiexec
        self._environ = environ  # (job_environment.JobEnvironment.for_helpers)
        self._key_text, self._dialling = job_key_text()
        self.nodes: List[RelayNode] = []
        try:
            for host, name in enumerate(names):
                process = self._start(host)
                self.nodes.append(
                    RelayNode(
                        f"relay on {name}",
                        process,
                        leaves_by_itself=False,
                        vital=host == 0,
                        host_name=name,
                        owner=self,
                    )
                )
                # vital: another host's loss is its ranks' to report
        except BaseException:
            for node in self.nodes:
                end_process_group(node.process, grace=0)
            raise

    def _start(self, host: int, seconds: float = READY_SECONDS) -> subprocess.Popen:
        """Host `host`'s relay, once it said it is ready (within `seconds`)."""
        name = self._names[host]
        command = relay_command(self._table.relay_plan(host).to_json())
        if host:  # on its host, through mpiexec (Hydra passes the environment on); it
            # ends itself when cut off from this host's relay, as ranks' keepers do
            command = [
                self._mpiexec,
                "-n",
                "1",
                "-hosts",
                name,
                *command,
                "--watch",
                f"{self._names[0]}:{self._table.relay_port}",
                "--lost-seconds",
                str(read_knob("MXKV_LOST_SECONDS")),
            ]
        return start_ready(f"relay on {name}", command, self._key_text, self._environ, seconds)

    def answers(self, name: str) -> bool:
        """Whether the relay of host `name` answers a ping with the job's key."""
        try:
            with socket.create_connection((name, self._table.relay_port), ANSWER_SECONDS) as plain:
                with self._dialling.wrap_socket(plain, server_hostname=None) as tls:
                    tls.sendall(PING + b"\n")
                    return tls.recv(len(PONG)) == PONG
        except (OSError, ssl.SSLError):
            return False

    def _start_again(self, node: RelayNode, seconds: float = READY_SECONDS) -> None:
        """Ends the node's process (what is left of it) and starts its relay again."""
        end_process_group(node.process, grace=0)
        host = self._names.index(node.host_name)
        node.process = self._start(host, seconds)
        say(f"the relay on {node.host_name} started again (port {self._table.relay_port})")

    def restart_crashed(self, node: RelayNode) -> None:
        """RelayNode.after_exit's thread (holding node.busy): starts a crashed relay
        again, or says why not."""
        try:
            self._start_again(node)
        except RuntimeError as err:
            say(f"the {node.name} could not be started again: {err}")
        finally:
            node.busy.release()

    def wait_until_answering(self, node: RelayNode, deadline: float) -> Optional[str]:
        """Blocks until the relay of `node`'s host answers the launcher's ping, or until
        `deadline` (time.monotonic()). Returns None once it answers, else why not.

        A relay cut off from the job ends itself, but its mpiexec here hears of that only
        once the link is back: so while its mpiexec runs, this waits for it to answer (the
        old relay, if the cut was short); once it has exited, the host is reachable again
        (or gone: the start fails), and the relay is started again."""
        said = "its host did not answer over the network"
        with node.busy:  # (a crashed relay is not started again beside this)
            while True:
                if node.process.poll() is None and self.answers(node.host_name):
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return f"the relay on {node.host_name} did not answer: {said}"
                if node.process.poll() is not None:
                    if node.note_crash():  # (said as after_exit says it)
                        say(
                            f"the {node.name} exited with status {node.process.returncode}; "
                            "starting it again"
                        )
                    try:
                        self._start_again(node, left)
                        continue
                    except RuntimeError as err:
                        said = str(err)
                time.sleep(min(BEAT_SECONDS, max(0.0, deadline - time.monotonic())))


def relay_command(plan: str) -> List[str]:
    """A relay of this job's (its plan as JSON; the key in MXKV_RELAY_KEY)."""
    return [
        sys.executable,
        "-m",
        "mxkv_hybrid.launch.relay",
        "--plan-json",
        plan,
        "--key-env",
        "MXKV_RELAY_KEY",
    ]


def start_ready(
    name: str,
    command: List[str],
    key_text: str,
    environ: Mapping[str, str],
    seconds: float = READY_SECONDS,
) -> subprocess.Popen:
    """Starts a relay (environment `environ`, with the job's key `key_text` in
    MXKV_RELAY_KEY) and waits `seconds` at most for its 'ready' line; its other lines go
    to stderr."""
    env = dict(environ, MXKV_RELAY_KEY=key_text)
    process = spawn(command, env=env, stderr=subprocess.PIPE, text=True)
    stderr = process.stderr
    assert stderr is not None  # (a pipe)
    first: List[Optional[str]] = [None]
    reader = threading.Thread(target=lambda: first.__setitem__(0, stderr.readline()))
    reader.start()
    reader.join(seconds)
    if not first[0] or "ready" not in first[0]:
        end_process_group(process, grace=0)
        said = ((first[0] or "") + stderr.read()).strip().splitlines()
        raise RuntimeError(f"the {name} did not start: " + (said[-1] if said else "no output"))
    threading.Thread(target=_forward, args=(process,), daemon=True).start()
    return process


def _forward(process: subprocess.Popen) -> None:
    assert process.stderr is not None  # (a pipe)
    for line in process.stderr:
        sys.stderr.write(line)
        sys.stderr.flush()

"""Addresses between hosts: whether a name is this machine, which of this machine's
addresses and interfaces another host is reached from (the source of the kernel's route
towards it; no packet is sent), and the address a ps-lite node announces (DMLC_NODE_HOST).

Standard library only: the package's `__init__` calls `announce_own_address` before MXNet is
imported, because a parameter-server process becomes its node at that import.
"""

import fcntl
import ipaddress
import os
import socket
import struct
from typing import Dict, List, MutableMapping, Optional

SIOCGIFADDR = 0x8915  # ioctl: an interface's IPv4 address


class NetworkSetupError(Exception):
    """A host name that does not resolve, or an address no route leads to."""


def resolve(name: str) -> str:
    """The IPv4 address of host `name` (an address stays itself)."""
    try:
        return socket.gethostbyname(name)
    except OSError as err:
        raise NetworkSetupError(
            f"host {name} does not resolve on {socket.gethostname()} ({err})"
        ) from None


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(resolve(address)).is_loopback


def is_own_address(address: str) -> bool:
    """Whether `address` is one of this machine's (it can be bound to)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def is_this_machine(name: str) -> bool:
    """Whether host `name` (a -H entry) is the machine this runs on."""
    if name in ("localhost", socket.gethostname()):
        return True
    return is_own_address(resolve(name))


def route_source(destination: str) -> str:
    """This machine's address on the route towards `destination`."""
    address = resolve(destination)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, 9))
        except OSError as err:
            raise NetworkSetupError(
                f"no route from {socket.gethostname()} towards {destination} ({address}): {err}"
            ) from None
        return probe.getsockname()[0]


def interface_addresses() -> Dict[str, str]:
    """{interface: its IPv4 address} of this machine's interfaces that have one."""
    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode()[:15])
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError:
                continue
            found[name] = socket.inet_ntoa(answer[20:24])
    return found


def interface_of(address: str) -> Optional[str]:
    """The interface that holds `address`, or None."""
    return next((name for name, held in interface_addresses().items() if held == address), None)


def describe_address(address: str) -> str:
    """'198.18.3.11 (eth0)'."""
    interface = interface_of(address)
    return f"{address} ({interface})" if interface else address


def scheduler_address(remote_hosts: List[str]) -> str:
    """The one address of this machine that every host in `remote_hosts` is routed to."""
    sources = {host: route_source(host) for host in remote_hosts}
    if len(set(sources.values())) > 1:
        routes = ", ".join(
            f"towards {host} from {describe_address(source)}" for host, source in sources.items()
        )
        raise NetworkSetupError(
            f"the hosts are reached from different addresses of this "
            f"machine ({routes}): choose the one every host reaches with "
            "--ps-host ADDRESS (and --ps-interface NAME)"
        )
    return next(iter(sources.values()))


def announce_own_address(environ: MutableMapping[str, str] = os.environ) -> None:
    """For a ps-lite worker or server whose scheduler is at DMLC_PS_ROOT_URI: sets
    DMLC_NODE_HOST to the address this host reaches the scheduler from, so the others
    reach this node there (ps-lite would take the first interface it finds). Leaves a
    DMLC_NODE_HOST or DMLC_INTERFACE the user set alone; does nothing without a scheduler,
    or when no route leads to it (the connection's own wait reports that)."""
    root = environ.get("DMLC_PS_ROOT_URI")
    if (
        not root
        or environ.get("DMLC_ROLE") == "scheduler"
        or environ.get("DMLC_NODE_HOST")
        or environ.get("DMLC_INTERFACE")
    ):
        return
    try:
        environ["DMLC_NODE_HOST"] = route_source(root)
    except NetworkSetupError:
        return

"""Where the parameter-server scheduler listens (--ps-host): on one machine, loopback; with
ranks or servers on other hosts, the address of this machine that the route towards them
leaves from, checked before anything starts. A loopback or foreign --ps-host with remote
hosts, hosts that do not resolve, or hosts reached from different addresses are refused
at once, naming the flag to set. Each host's ranks and servers then announce their own
address (network.py), never this machine's."""

import socket
from typing import List, Optional

from ..network import (
    NetworkSetupError,
    describe_address,
    interface_addresses,
    is_loopback,
    is_own_address,
    is_this_machine,
    scheduler_address,
)

LOOPBACK = "127.0.0.1"


class PsHostRefused(Exception):
    """--ps-host cannot work for this job; the message names the fix."""


def remote_hosts(hosts: List[str]) -> List[str]:
    """The hosts (of -H, --hostfile, --server-hosts) that are not this machine."""
    try:
        return [host for host in dict.fromkeys(hosts) if not is_this_machine(host)]
    except NetworkSetupError as err:
        raise PsHostRefused(f"{err}: check -H / --hostfile / --server-hosts") from None


def _this_machines_addresses() -> str:
    shown = [
        f"{address} ({name})"
        for name, address in interface_addresses().items()
        if not address.startswith("127.")
    ]
    return ", ".join(shown) or "none but loopback"


def choose_ps_host(given: Optional[str], hosts: List[str]) -> str:
    """The scheduler's address for a job whose ranks and servers run on `hosts` (empty:
    this machine only), given --ps-host `given` (None: not given)."""
    remote = remote_hosts(hosts)
    if not remote:
        return given or LOOPBACK
    routed: Optional[str]
    try:
        routed = scheduler_address(remote)
    except NetworkSetupError as err:
        if given is None:
            raise PsHostRefused(f"{err}") from None
        routed = None
    else:
        if given is None:
            return routed
    suggestion = (
        f"--ps-host {routed} (this machine's address {describe_address(routed)}, "
        f"where the route towards {remote[0]} leaves; or leave --ps-host out)"
        if routed
        else f"one of this machine's addresses: {_this_machines_addresses()}"
    )
    if is_loopback(given):
        raise PsHostRefused(
            f"--ps-host {given} is loopback, and the ranks or servers on "
            f"{', '.join(remote)} would look for the scheduler on their own "
            f"loopback: give {suggestion}"
        )
    if not is_own_address(given):
        raise PsHostRefused(
            f"--ps-host {given} is not an address of this machine "
            f"({socket.gethostname()}), where the scheduler runs: give "
            f"{suggestion}"
        )
    return given

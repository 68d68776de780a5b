"""The launcher's command line as a typed, frozen plan: built and validated once by
launcher.parse_arguments, read by everything after it (nothing past the command line takes
argparse's Namespace). What the plan implies (each host's slots, the groups, whether
ps-lite's connections go through relays) is computed here, in one place."""

import argparse
import math
from dataclasses import dataclass, fields
from typing import List, Optional, Tuple

from .group_jobs import GroupPlan, plan_groups, plan_groups_by_host
from .host_sources import read_mpi_hostfile
from .ps_address import remote_hosts


@dataclass(frozen=True)
class LaunchPlan:
    """mxkv-launch's options (see `mxkv-launch --help`), as validated."""

    command: Tuple[str, ...]  # the program and its arguments (after `--`)
    num_ranks: int  # -n (0 with --serve, which starts no rank)
    hosts: Optional[str]  # -H host[:slots],... (or the batch scheduler's hosts)
    hostfile: Optional[str]
    timeout: Optional[float]
    restarts: int
    servers: int
    group_size: int
    server_hosts: Optional[str]
    ps_host: Optional[str]  # the scheduler's address, chosen once the plan is validated
    ps_interface: Optional[str]
    trusted_network: bool
    group_jobs: bool  # one MPI job per group
    group_jobs_by_default: bool  # ... because the mode runs its groups apart by default
    one_job: bool
    serve: bool
    groups: int  # with --serve: how many groups join
    join: Optional[str]  # TOKEN@HOST:PORT of a served job
    auto: bool
    check: bool
    dry_run: bool
    log_level: Optional[str]

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> "LaunchPlan":
        """The plan of parsed arguments (argparse's names are the fields' names)."""
        values = {field.name: getattr(args, field.name) for field in fields(cls)}
        return cls(**dict(values, command=tuple(values["command"]), num_ranks=args.num_ranks or 0))

    @property
    def scheduler_host(self) -> str:
        """--ps-host, which validation sets wherever a scheduler is started."""
        assert self.ps_host is not None, "the plan was validated with servers"
        return self.ps_host

    @property
    def has_hosts(self) -> bool:
        """Whether hosts are named (-H or --hostfile)."""
        return bool(self.hosts or self.hostfile)

    def host_slots(self) -> List[Tuple[str, int]]:
        """(host, slots) of each -H entry (host[:slots], 1 slot if none) or --hostfile line
        (host_sources.read_mpi_hostfile: host[:slots] or host slots=N); [] without hosts."""
        if self.hosts:
            entries = [entry for entry in self.hosts.split(",") if entry]
            return [
                (entry.split(":")[0], int(entry.split(":")[1]) if ":" in entry else 1)
                for entry in entries
            ]
        return read_mpi_hostfile(self.hostfile) if self.hostfile else []

    @property
    def relays_wanted(self) -> bool:
        """Whether ps-lite's connections between hosts go through relays: ranks on other
        hosts (-H / --hostfile), unless --trusted-network."""
        if self.trusted_network or not self.has_hosts:
            return False
        return bool(remote_hosts([host for host, _ in self.host_slots()]))

    def count_groups(self) -> int:
        """Groups of --group-size ranks, else one per host (-H / --hostfile, else one host)."""
        if self.group_size:
            return math.ceil(self.num_ranks / self.group_size)
        if self.has_hosts:
            return len({host for host, _ in self.host_slots()})
        return 1

    def group_plans(self) -> List[GroupPlan]:
        """Groups of --group-size ranks, or one group per -H/--hostfile host."""
        if self.group_size:
            return plan_groups(self.num_ranks, self.group_size)
        return plan_groups_by_host(self.host_slots())

"""The environment every process the launcher starts is handed, written here and nowhere
else (the launcher never writes os.environ):

- the launcher's own environment, as it started;
- what the plan sets for every rank: the log level, the group size, --auto;
- defaults the user's own values win over: MPI's transport settings (mpi_settings),
  ps-lite's heartbeat where a node may be restarted (control.timing.PS_HEARTBEAT) and
  OpenMP's threads per process (threads.py);
- the launcher's link (MXKV_LAUNCHER_LINK), once it listens;
- the parameter servers now running (DMLC_*, MXKV_PS_NODES), replaced at each start."""

import os
from collections import ChainMap
from typing import Dict, Mapping, Tuple

from .. import mpi_settings
from ..config import read_knob
from . import threads
from .control.timing import PS_HEARTBEAT
from .launch_plan import LaunchPlan

LINK = "MXKV_LAUNCHER_LINK"
# what a group that joins a served job needs to reach its servers; never the serving
# machine's own DMLC_NODE_HOST / DMLC_INTERFACE: each host announces its own (network.py)
SERVING = (
    "DMLC_PS_ROOT_URI",
    "DMLC_PS_ROOT_PORT",
    "DMLC_NUM_SERVER",
    "DMLC_NUM_WORKER",
    "PS_HEARTBEAT_INTERVAL",
    "PS_HEARTBEAT_TIMEOUT",
)


class JobEnvironment:
    """The environments of one launcher's ranks, parameter-server processes and relays."""

    def __init__(
        self,
        launchers: Mapping[str, str],
        defaults: Dict[str, str],
        set_by_plan: Dict[str, str],
    ):
        self._launchers = dict(launchers)
        self._defaults = defaults  # the user's values win over these
        self._set_by_plan = set_by_plan  # these win over the user's
        self._link: Dict[str, str] = {}
        self._servers: Dict[str, str] = {}

    @classmethod
    def of_plan(
        cls, plan: LaunchPlan, launchers: Mapping[str, str] = os.environ
    ) -> "JobEnvironment":
        """The environment `plan` asks for, on top of `launchers` (the launcher's own)."""
        set_by_plan: Dict[str, str] = {}
        if plan.log_level:
            set_by_plan["MXKV_LOG_LEVEL"] = plan.log_level
        if plan.group_size:
            set_by_plan["MXKV_GROUP_SIZE"] = str(plan.group_size)
        if plan.auto:
            set_by_plan["MXKV_AUTO"] = "1"
        defaults: Dict[str, str] = {threads.VARIABLE: str(threads.threads_per_process(plan))}
        if plan.serve or (plan.restarts and (plan.group_jobs or plan.join)):
            defaults.update(PS_HEARTBEAT)  # a node may be restarted in its place
        chained = ChainMap(defaults, dict(launchers))  # setdefault writes into `defaults`
        mpi_settings.choose(str(read_knob("MXKV_TRANSPORT", launchers)), chained)
        return cls(
            launchers, {k: v for k, v in defaults.items() if k not in launchers}, set_by_plan
        )

    def listen_at(self, address: str) -> None:
        """The launcher's link listens at `address` (the ranks' MXKV_LAUNCHER_LINK)."""
        self._link = {LINK: address}

    def serve_with(self, servers: Mapping[str, str]) -> None:
        """The parameter servers now running, as the DMLC_* settings every rank gets."""
        self._servers = dict(servers)

    def for_ranks(self, **extra: str) -> Dict[str, str]:
        """A rank's environment (and mpiexec's, which passes it on), with `extra`."""
        return {
            **self._defaults,
            **self._launchers,
            **self._set_by_plan,
            **self._link,
            **self._servers,
            **extra,
        }

    def for_helpers(self) -> Dict[str, str]:
        """A relay's or a probe's: a process that mpiexec may start on another host, but
        no rank of the job's (no link: no keeper, no rank in its lines)."""
        return {**self._defaults, **self._launchers, **self._set_by_plan}

    def scheduler_address(self) -> Tuple[str, int]:
        """(host, port) the scheduler now started listens at."""
        return self._servers["DMLC_PS_ROOT_URI"], int(self._servers["DMLC_PS_ROOT_PORT"])

    def serving_settings(self) -> Dict[str, str]:
        """What a joining group's ranks need to reach the servers now started (SERVING)."""
        ranks = self.for_ranks()
        return dict({name: ranks[name] for name in SERVING if ranks.get(name)}, DMLC_ROLE="worker")

"""Every bound of the control plane, in one place, derived from MXKV_LOST_SECONDS (the
bound on noticing a lost host, 4.5 s by default) and ps-lite's heartbeat.

- every heartbeat of the control plane (a rank's keeper and the launcher, the --serve and
  --join launchers, a relay watching the launcher's host's relay) beats each
  `BEAT_SECONDS`; a member silent for MXKV_LOST_SECONDS is lost, one heard within
  `HEARD_SECONDS` is reachable, and a connection that has not said who it is within
  `HELLO_SECONDS` is closed; a relay's connection to another host fails once nothing it
  sent has been acknowledged for MXKV_LOST_SECONDS (TCP_USER_TIMEOUT, keepalive);
- a process that dies is named at once (its mpiexec exits, its rank's link closes: within
  0.6 s in the fault matrix); only a host that falls silent waits for the bound, and is
  named at most one beat and one launcher poll (0.2 s) after it. The rank's side of
  every beat is its keeper, a process of its own that neither MXNet's work nor Python's
  lock can starve, so the bound can be short: 4.5 s rides out a host stopped for 3 s (a
  long pause, a swap storm: silent 3.5 s at most, one beat after it continues, and 1 s
  more for a loaded machine) and names a silent host within 5 s of its last beat (the
  bound, and one launcher poll); examples/benchmarks/faults_throughput.py
  --false-alarms measures how often a quiet job is wrongly named lost under full load;
- what is not a silence gets bounds of its own: a rank's first call from another host
  (`FIRST_CALL_SECONDS`: a start under load, through ssh, MXNet's import) and a lost
  host's return (MXKV_HOST_RETURN_SECONDS, below);
- ps-lite's heartbeat (`PS_HEARTBEAT`): a node beats every second and the scheduler counts
  it dead after 3 s silent, so that a restarted node can take the dead one's place;
- a lost group is started again `restart_delay` after it was lost: once ps-lite's
  scheduler has surely missed the old node's heartbeats (the timeout, and 2 s more);
- its host then gets `host_return_seconds` (MXKV_HOST_RETURN_SECONDS) to answer again,
  which a host behind a healed link does; one that does not is given up, and the other
  groups' finish line goes on without it."""

from typing import Mapping

from ...config import read_knob

BEAT_SECONDS = 0.5  # every heartbeat: the launcher's link, the rendezvous, a relay's watch
HEARD_SECONDS = 3.0  # a member heard from within this long is reachable
FIRST_CALL_SECONDS = 15.0  # a rank on another host that never called this long is lost
EXIT_GRACE_SECONDS = 2.0  # a job still running this long after a rank's script failed
# after mpiexec reported a rank's end, for its link to close: a killed rank's keeper closes it
# at once, but 1 s was too short under a load of 10 on 2 cores (the suite beside 6 ranks)
LINK_CLOSE_SECONDS = 3.0
HELLO_SECONDS = 10.0  # a connection that has not said who it is by then is closed
# ps-lite's heartbeat for every job that may restart a node (seconds; the user's win)
PS_HEARTBEAT = {"PS_HEARTBEAT_INTERVAL": "1", "PS_HEARTBEAT_TIMEOUT": "3"}
RESTART_MARGIN_SECONDS = 2.0  # past ps-lite's heartbeat timeout, before a restart


def restart_delay(environ: Mapping[str, str]) -> float:
    """Seconds from a group's loss to its restart, under `environ`'s ps-lite heartbeat."""
    return float(environ.get("PS_HEARTBEAT_TIMEOUT", "0")) + RESTART_MARGIN_SECONDS


def host_return_seconds() -> float:
    """Seconds a lost group's host has, after its restart is due, to answer again."""
    return float(read_knob("MXKV_HOST_RETURN_SECONDS"))


def first_call_seconds(lost_seconds: float) -> float:
    """Seconds a rank started on another host has to call the launcher first."""
    return max(FIRST_CALL_SECONDS, lost_seconds)

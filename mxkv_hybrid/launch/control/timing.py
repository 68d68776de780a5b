"""Every bound of the control plane, in one place, derived from MXKV_LOST_SECONDS (the
bound on noticing a lost host, 30 s by default) and ps-lite's heartbeat.

- every heartbeat of the control plane (a rank's keeper and the launcher, the --serve and
  --join launchers, a relay watching the launcher's host's relay) beats each
  `BEAT_SECONDS`; a member silent for MXKV_LOST_SECONDS is lost, one heard within
  `HEARD_SECONDS` is reachable, and a connection that has not said who it is within
  `HELLO_SECONDS` is closed; a relay's connection to another host fails once nothing it
  sent has been acknowledged for MXKV_LOST_SECONDS (TCP_USER_TIMEOUT, keepalive);
- a process that dies is named at once (its mpiexec exits, its rank's link closes: within
  0.6 s in the fault matrix); only a host that falls silent waits for the bound, and is
  named at most one beat and one launcher poll (0.2 s) after it. The bound stays 30 s by
  default because it is also a rank's time to first call from another host (a start
  under load, through ssh), the relays' watch and a joined launcher's silence: a shorter
  default wants its false-alarm rate measured under full load first;
- ps-lite's heartbeat (`PS_HEARTBEAT`): a node beats every second and the scheduler counts
  it dead after 3 s silent, so that a restarted node can take the dead one's place;
- a lost group is started again `restart_delay` after it was lost: once ps-lite's
  scheduler has surely missed the old node's heartbeats (the timeout, and 2 s more);
- its host then gets `host_return_seconds` (MXKV_LOST_SECONDS) to answer again, which a
  host behind a healed link does; one that does not is given up, and the other groups'
  finish line goes on without it."""

from typing import Mapping

from ...config import read_knob

BEAT_SECONDS = 1.0  # every heartbeat: the launcher's link, the rendezvous, a relay's watch
HEARD_SECONDS = 3 * BEAT_SECONDS  # a member heard from within this long is reachable
HELLO_SECONDS = 10.0  # a connection that has not said who it is by then is closed
# ps-lite's heartbeat for every job that may restart a node (seconds; the user's win)
PS_HEARTBEAT = {"PS_HEARTBEAT_INTERVAL": "1", "PS_HEARTBEAT_TIMEOUT": "3"}
RESTART_MARGIN_SECONDS = 2.0  # past ps-lite's heartbeat timeout, before a restart


def restart_delay(environ: Mapping[str, str]) -> float:
    """Seconds from a group's loss to its restart, under `environ`'s ps-lite heartbeat."""
    return float(environ.get("PS_HEARTBEAT_TIMEOUT", "0")) + RESTART_MARGIN_SECONDS


def host_return_seconds() -> float:
    """Seconds a lost group's host has, after its restart is due, to answer again."""
    return float(read_knob("MXKV_LOST_SECONDS"))

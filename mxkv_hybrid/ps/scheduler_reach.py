"""Before a leader joins ps-lite (which waits for its scheduler silently and for ever): a
TCP connection to the scheduler's port, tried until it is accepted, with a line every
PROGRESS_SECONDS that says which address is waited for and why, and a clear error after
MXKV_PS_TIMEOUT that names --ps-host. A connection that sends nothing is harmless to
ps-lite's ZeroMQ sockets."""

import logging
import socket
import time

from ..comm import stall
from ..errors import ConfigError

log = logging.getLogger(__name__)
PROGRESS_SECONDS = 5.0
ATTEMPT_SECONDS = 1.0


def wait_for_scheduler(host: str, port: int, timeout: float, who: str) -> None:
    """Returns once the scheduler at host:port accepts a connection; raises ConfigError
    when it has not within `timeout` seconds."""
    what = f"waiting for the parameter-server scheduler at {host}:{port}"
    started = time.monotonic()
    reported = started
    with stall.outside(what):
        while True:
            try:
                socket.create_connection((host, port), timeout=ATTEMPT_SECONDS).close()
                return
            except OSError as err:
                reason = err.strerror or str(err) or err.__class__.__name__
            now = time.monotonic()
            if now - started > timeout:
                raise ConfigError(
                    f"{who} on {socket.gethostname()} could not reach the parameter-server "
                    f"scheduler at {host}:{port} within {timeout:g} s (MXKV_PS_TIMEOUT): "
                    f"{reason}. The scheduler runs where mxkv-launch started it, and "
                    "--ps-host must be an address of that machine this host reaches "
                    "(mxkv-launch --check tests it)"
                )
            if now - reported >= PROGRESS_SECONDS:
                reported = now
                log.warning(
                    f"mxkv_hybrid: {who} on {socket.gethostname()}: {what} ({reason}) "
                    f"for {now - started:.0f} s of {timeout:g}"
                )
            time.sleep(max(0.0, ATTEMPT_SECONDS - (time.monotonic() - now)))

"""The control plane's one channel: JSON objects, one per line, over TCP. A connection's
first message carries the job's token (compared in constant time); a line that is not a
JSON object, or is longer than `LINE_BYTES`, ends the connection; a heartbeat is the empty
object. Every control connection speaks it: the launcher's link with each rank
(link.py, and the rank's side: keeper.py, keeper_process.py), the --serve/--join
rendezvous (rendezvous.py) and the reach check of --check across hosts (reach_check.py).
The relays' ping is not a control connection: it travels in the relay's own stream, whose
first line says whether it is a ping or ps-lite's bytes (relay.py).

Standard library only: keeper_process.py and reach_check.py run as scripts and import it
by path."""

import hmac
import json
from typing import BinaryIO, List, Optional

LINE_BYTES = 1 << 16  # longer than any message of the control plane: a stranger's
BEAT = b"{}\n"  # a heartbeat
TOO_LONG = "a line longer than any message of the control channel"


class ChannelError(ValueError):
    """What came is not a message of the channel (a stranger, or a broken peer)."""


def encode(message: dict) -> bytes:
    """`message` as one line of the channel."""
    return json.dumps(message).encode() + b"\n"


def decode(line: bytes) -> dict:
    """One line of the channel as its message; ChannelError if it is not one."""
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        raise ChannelError("not a message of the control channel")
    return message


def send(connection, message: dict) -> None:
    """Sends `message` on a blocking socket (OSError when the connection is gone)."""
    connection.sendall(encode(message))


def receive(stream: BinaryIO) -> Optional[dict]:
    """The next message from a socket's binary file (makefile("rb")); None when the peer
    closed the connection; ChannelError for a line that is not a message."""
    line = stream.readline(LINE_BYTES + 1)
    if not line:
        return None
    if len(line) > LINE_BYTES:
        raise ChannelError(TOO_LONG)
    return decode(line)


def token_matches(message: dict, token: str) -> bool:
    """Whether a connection's first message carries `token`."""
    return hmac.compare_digest(str(message.get("token", "")), token)


class Lines:
    """The messages of one non-blocking connection, as its bytes arrive."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> List[dict]:
        """The messages completed by `data`; ChannelError for a line that is not one."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > LINE_BYTES:
            raise ChannelError(TOO_LONG)
        return [decode(line) for line in lines]

"""The servers' optimizer states (modes sync and async, where the optimizer runs there),
saved and loaded by the servers themselves when a worker asks: each server writes or reads
its own share beside the path the Trainer was given (`PATH.serverN`, on the servers' file
system). MXNet's servers take a worker's word only as a command to their controller (head
0, MXNet's kController, whose body MXNet unpickles); a command of this module's is told
apart by its prefix, and ps/server.py's controller handles it before MXNet's would."""

import os
from typing import Any, Optional, Tuple

from ..atomic_file import write_atomically

PREFIX = "mxkv-states "
ACTIONS = ("save", "save-optimizer", "load")  # save-optimizer: the states and the optimizer


def command(action: str, path: str) -> str:
    """The body of a command asking every server to `action` its states at `path`."""
    assert action in ACTIONS, action
    return f"{PREFIX}{action} {os.path.abspath(path)}"


def server_file(path: str, server: int) -> str:
    """Where server number `server` keeps its share of the states saved at `path`."""
    return f"{path}.server{server}"


def parse(body: bytes) -> Optional[Tuple[str, str]]:
    """(action, path) of a command of this module's, or None (an optimizer for MXNet)."""
    text = body.decode("utf-8", errors="replace")
    if not text.startswith(PREFIX):
        return None
    action, _, path = text[len(PREFIX) :].partition(" ")
    return action, path


def handle(action: str, path: str, store: Any) -> None:
    """On a server: saves or loads its updater's states (`store`: its MXNet KVStore)."""
    updater = store._updater  # (set by the optimizer the workers sent)
    if updater is None:
        raise RuntimeError("this server has no optimizer yet: the workers set none")
    where = server_file(path, store.rank)
    if action == "load":
        with open(where, "rb") as f:
            updater.set_states(f.read())
    else:
        write_atomically(where, updater.get_states(dump_optimizer=action == "save-optimizer"))


def describe(action: str, path: str) -> str:
    """What a server was asked, for the line that says it failed."""
    verb = "load its optimizer states from" if action == "load" else "save its optimizer states to"
    return f"{verb} {path}.server<N>"

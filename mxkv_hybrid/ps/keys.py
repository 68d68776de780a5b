"""The int keys the parameter servers know a store's keys by."""

from typing import Dict, Optional, cast

from ..comm.collectives import Key
from ..errors import MXKVError, ServerKeyConflict

# Server key -> the ServerKeys (its owner token) that holds it in this process. Every store
# of a process shares one ps-lite connection (ps.acquire), so two stores numbering their
# keys alike would silently share, or resize, each other's weights on the servers.
_HOLDERS: Dict[int, object] = {}


def is_held(number: int) -> bool:
    """Whether a store of this process holds server key `number`."""
    return number in _HOLDERS


class ServerKeys:
    """An int key stays itself; string keys are numbered 0, 1, ... in the order they are
    first seen, as MXNet numbers them (so a server-side optimizer sees the same indices).
    One dist kvstore takes one key type only, and the servers' reserved counter key is an
    int, hence the numbering here."""

    def __init__(self):
        self._numbers: Dict[Key, int] = {}
        self._key_type: Optional[type] = None
        self._strings = 0
        self._token = object()

    def __contains__(self, key: Key) -> bool:
        return key in self._numbers

    def __getitem__(self, key: Key) -> int:
        return self._numbers[key]

    def add(self, key: Key) -> int:
        """The number of `key`, given one if it is new."""
        if key not in self._numbers:
            key_type = str if isinstance(key, str) else int
            if self._key_type not in (None, key_type):
                raise MXKVError(
                    f"init: key {key!r} mixes string and int keys in one store; "
                    "MXNet's kvstores take one key type"
                )
            number = cast(int, key) if key_type is int else self._strings
            self.claim(number, f"key {key!r}")
            self._key_type = key_type
            self._numbers[key] = number
            self._strings += key_type is str
        return self._numbers[key]

    def claim(self, number: int, what: str) -> None:
        """Reserves server key `number` (named `what` in errors) for this store; it is an
        error when another store of this process holds it."""
        if _HOLDERS.setdefault(number, self._token) is not self._token:
            raise ServerKeyConflict(
                f"{what} would be parameter-server key {number}, which another hybrid store "
                "of this process already holds: the servers keep one model per process (one "
                "optimizer, weights known by index, as in MXNet's dist kvstores). Train one "
                "model with one Trainer or Module per process (to change the learning "
                "rate, keep the Trainer and call set_learning_rate), or use MXKV_MODE=sync, where "
                "stores share the servers; values that are not weights need no init: "
                "pushpull sums them over the ranks"
            )

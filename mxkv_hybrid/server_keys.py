"""The int keys the parameter servers know a store's keys by."""
from typing import Dict, Optional

from .collectives import Key
from .errors import MXKVError


class ServerKeys:
    """An int key stays itself; string keys are numbered 0, 1, ... in the order they are
    first seen, as MXNet numbers them (so a server-side optimizer sees the same indices).
    One dist kvstore takes one key type only, and the servers' reserved counter key is an
    int, hence the numbering here."""

    def __init__(self):
        self._numbers: Dict[Key, int] = {}
        self._key_type: Optional[type] = None
        self._strings = 0

    def __contains__(self, key: Key) -> bool:
        return key in self._numbers

    def __getitem__(self, key: Key) -> int:
        return self._numbers[key]

    def add(self, key: Key) -> int:
        """The number of `key`, given one if it is new."""
        if key not in self._numbers:
            key_type = str if isinstance(key, str) else int
            if self._key_type not in (None, key_type):
                raise MXKVError(f"init: key {key!r} mixes string and int keys in one store; "
                                "MXNet's kvstores take one key type")
            self._key_type = key_type
            self._numbers[key] = key if key_type is int else self._strings
            self._strings += key_type is str
        return self._numbers[key]

"""`when_settled(action)`: runs `action` once no module of this package is being imported.

`import mxkv_hybrid` registers the store when MXNet is imported (a post-import hook). The
first `import mxnet` may come from inside a module of this package that is still being
executed (`from mxkv_hybrid.kvstore import Hybrid` before MXNet: kvstore.py's own
`import mxnet`); installing the hooks then would import that half-made module. So the
hook waits: a meta-path finder counts the package's modules being executed, and the
action runs when the outermost of them has finished (at once when none is)."""

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Callable, List, Optional, Sequence

_lock = threading.Lock()
_executing = 0  # modules of this package being executed, nested imports included
_waiting: List[Callable[[], None]] = []


def _settled() -> None:
    """Runs the actions that waited, once no module of the package is being executed."""
    while True:
        with _lock:
            if _executing or not _waiting:
                return
            action = _waiting.pop(0)
        action()


def _counted(execute: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    """A loader's `exec_module`, its executions counted."""

    def exec_module(module: ModuleType) -> None:
        global _executing
        with _lock:
            _executing += 1
        try:
            execute(module)
        finally:
            with _lock:
                _executing -= 1
        _settled()

    return exec_module


class _PackageFinder(importlib.abc.MetaPathFinder):
    """Finds the package's modules as the path finder does; each one's loader (an object
    of its own) counts its execution."""

    def __init__(self, package: str):
        self._prefix = package + "."

    def find_spec(
        self, name: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if not name.startswith(self._prefix):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            loader = spec.loader
            loader.exec_module = _counted(loader.exec_module)  # type: ignore[method-assign,union-attr]
        return spec


def watch(package: str) -> None:
    """Counts the executions of `package`'s modules from now on (once per package)."""
    if not any(isinstance(f, _PackageFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PackageFinder(package))


def when_settled(action: Callable[[], None]) -> None:
    """Runs `action` now, or once the package's modules being executed have finished."""
    with _lock:
        _waiting.append(action)
    _settled()

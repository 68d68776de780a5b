"""The package's folders are its layers: every import of a module inside mxkv_hybrid (lazy
ones inside functions included) goes to its own folder or to one its folder may use, and
the folders' import graph has no cycle. The allowed sets are those the folders'
`__init__.py` docstrings state.

One part of the launcher's control plane is the ranks' too: its keeper (what a rank
imports to keep its link with the launcher, and the keeper process it starts) and the
timing both sides share. They form a unit of their own, `keeper`, at the bottom: every
layer may import it, and it imports nothing of the package but the base modules."""

import ast
import pathlib
from typing import Dict, Iterator, Set, Tuple

import pytest

import mxkv_hybrid

PACKAGE = pathlib.Path(mxkv_hybrid.__file__).parent


# root modules every layer may read
BASE = {
    "config",
    "capabilities",
    "errors",
    "atomic_file",
    "mxnet_version",
    "logs",
    "network",
    "mpi_settings",
    "timeline_parts",
    "import_settle",
}


# the control plane's rank side (launch/control/): the unit `keeper` (with the channel it
# speaks, the timing both sides share and the member rows it reads back), which every
# layer reads
KEEPER = {
    ("launch", "control", name)
    for name in ("keeper", "keeper_process", "timing", "channel", "members")
}


ENTRY_POINTS = {"__init__", "run", "tune", "self_check"}  # root modules a user imports or runs


# unit -> the units it may import (besides itself and the base); a unit is a folder, a
# base module, the facade `kvstore` or an entry point.
ALLOWED: Dict[str, Set[str]] = {
    "config": {"capabilities", "errors"},
    "capabilities": set(),
    "errors": set(),
    "atomic_file": set(),
    "mxnet_version": set(),
    "logs": {"config"},
    "network": set(),
    "mpi_settings": set(),
    "timeline_parts": set(),
    "import_settle": set(),
    "keeper": set(),
    "comm": set(),
    "testing": set(),
    "plan": {"comm"},
    "shard": {"comm"},
    "safety": {"comm"},
    "ps": {"safety", "comm"},
    "modes": {"ps", "safety", "comm"},
    "observe": {"ps", "safety", "comm"},
    "kvstore": {"modes", "observe", "ps", "safety", "comm"},
    "integration": {"kvstore", "modes", "observe", "ps", "safety", "comm"},
    # the launcher's processes never load MXNet nor the rank's communication: ps/ only for
    # where ps-lite's nodes listen and the scheduler's script (test_the_launcher_loads_...)
    "launch": {"ps"},
    **{
        entry: {"integration", "kvstore", "modes", "observe", "ps", "safety", "comm", *ENTRY_POINTS}
        for entry in ENTRY_POINTS
    },
}


def unit_of(module: Tuple[str, ...]) -> str:
    """('comm', 'stall') -> 'comm'; ('kvstore',) -> 'kvstore'; () (the package) -> '__init__';
    a module of KEEPER -> 'keeper'."""
    if module[:3] in KEEPER:
        return "keeper"
    return module[0] if module else "__init__"


def modules() -> Iterator[Tuple[Tuple[str, ...], pathlib.Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield (parts[:-1] if parts[-1] == "__init__" else parts), path


def imported_modules(module: Tuple[str, ...], path: pathlib.Path) -> Iterator[Tuple[str, ...]]:
    """Every module of the package that `path` imports, as a path inside the package."""
    package = module if path.name == "__init__.py" else module[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "mxkv_hybrid":
                    yield tuple(alias.name.split(".")[1:])
        elif isinstance(node, ast.ImportFrom):
            names = (node.module or "").split(".") if node.module else []
            if node.level:
                target = package[: len(package) - node.level + 1] + tuple(names)
            elif names[:1] == ["mxkv_hybrid"]:
                target = tuple(names[1:])
            else:
                continue
            for alias in node.names:  # `from . import stall` names a module
                directory = PACKAGE.joinpath(*target)
                is_module = (directory / alias.name).is_dir() or any(
                    directory.glob(alias.name + ".*")
                )
                yield target + (alias.name,) if is_module else target


def unit_graph() -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for module, path in modules():
        source = unit_of(module)
        for target in imported_modules(module, path):
            graph.setdefault(source, set()).add(unit_of(target))
    return graph


def test_every_module_belongs_to_a_known_layer():
    units = {unit_of(module) for module, _ in modules()}
    assert units == set(ALLOWED), "a new folder or root module needs its place in ALLOWED"


@pytest.mark.parametrize("module", [".".join(m) or "__init__" for m, _ in modules()])
def test_imports_go_down_the_layers(module):
    parts = tuple(module.split(".")) if module != "__init__" else ()
    path = dict(modules())[parts]
    source = unit_of(parts)
    for target in imported_modules(parts, path):
        unit = unit_of(target)
        assert unit == source or unit in BASE or unit in ALLOWED[source] or unit == "keeper", (
            f"mxkv_hybrid.{module} imports {'.'.join(target)}: {source} may not import {unit}"
        )


def test_the_folders_import_graph_has_no_cycle():
    graph = {unit: targets - {unit} for unit, targets in unit_graph().items()}
    finished: Set[str] = set()

    def visit(unit: str, path: Tuple[str, ...]) -> None:
        assert unit not in path, "import cycle: " + " -> ".join(path + (unit,))
        if unit in finished:
            return
        for target in graph.get(unit, ()):
            visit(target, path + (unit,))
        finished.add(unit)

    for unit in graph:
        visit(unit, ())


def test_the_checker_sees_lazy_and_relative_imports():
    """The walk finds imports inside functions and resolves `..` and `from . import x`."""
    collectives = PACKAGE / "comm" / "collectives.py"
    found = set(imported_modules(("comm", "collectives"), collectives))
    assert {("comm", "stall"), ("comm", "timeline"), ("comm", "extension"), ("config",)} <= found
    extension = PACKAGE / "comm" / "extension.py"
    assert ("comm", "_C") in set(imported_modules(("comm", "extension"), extension))  # lazy

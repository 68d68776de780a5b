"""config.py reads every MXKV_* variable (read_knob, Config.from_environment, launcher_mode):
no other module of the package reads one from the environment itself. Setting one for the
processes it starts (os.environ[...] = ..., dict(os.environ, MXKV_X=...)) is allowed."""

import ast
import pathlib
from typing import Iterator, Tuple

import mxkv_hybrid
from mxkv_hybrid.config import KNOBS

PACKAGE = pathlib.Path(mxkv_hybrid.__file__).parent
READERS = ("get", "pop")  # os.environ.get(...), environ.pop(...)


def _is_environment(node: ast.AST) -> bool:
    """os.environ, or a name `environ` (a mapping of the environment passed in)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _is_knob_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and str(node.value).startswith("MXKV_")


def knob_reads(path: pathlib.Path) -> Iterator[Tuple[int, str]]:
    """(line, code) of every read of an MXKV_* literal from the environment in `path`."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        read = False
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            read = _is_environment(node.value) and _is_knob_name(node.slice)
        elif isinstance(node, ast.Call) and node.args and _is_knob_name(node.args[0]):
            function = node.func
            read = (
                (
                    isinstance(function, ast.Attribute)
                    and function.attr in READERS
                    and _is_environment(function.value)
                )
                or (isinstance(function, ast.Attribute) and function.attr == "getenv")
                or (isinstance(function, ast.Name) and function.id == "getenv")
            )
        elif isinstance(node, ast.Compare) and _is_knob_name(node.left):
            read = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                _is_environment(right) for right in node.comparators
            )
        if read:
            yield node.lineno, ast.get_source_segment(source, node)


def knob_writes(path: pathlib.Path) -> Iterator[str]:
    """The MXKV_* names `path` sets for processes: os.environ[...] = ..., a keyword of a
    call (dict(os.environ, MXKV_X=...)) or a key of a dict literal."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Store)
            and _is_environment(node.value)
            and _is_knob_name(node.slice)
        ):
            yield node.slice.value
        elif isinstance(node, ast.Call):
            yield from (k.arg for k in node.keywords if (k.arg or "").startswith("MXKV_"))
        elif isinstance(node, ast.Dict):
            yield from (key.value for key in node.keys if key is not None and _is_knob_name(key))


def test_only_config_reads_knobs_from_the_environment():
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {code}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "config.py"
        for line, code in knob_reads(path)
    ]
    assert not found, "read it with config.read_knob (or add a reader there):\n" + "\n".join(found)


def test_the_checker_tells_reads_from_writes(tmp_path):
    source = tmp_path / "example.py"
    source.write_text(
        "import os\n"
        "a = os.environ['MXKV_A']\n"
        "b = os.environ.get('MXKV_B', '')\n"
        "c = environ.get('MXKV_C')\n"
        "d = os.getenv('MXKV_D')\n"
        "e = 'MXKV_E' in os.environ\n"
        "os.environ['MXKV_F'] = '1'\n"
        "env = dict(os.environ, MXKV_G='1')\n"
        "h = os.environ.get('DMLC_ROLE')\n"
        "i = 'MXKV_I' in env\n"
    )
    assert [line for line, _ in knob_reads(source)] == [2, 3, 4, 5, 6]


def test_what_the_launcher_sets_for_its_ranks_is_a_knob():
    """The ranks refuse an unknown MXKV_* name, so all they receive must be knobs; the
    relays' key (MXKV_RELAY_KEY, named on their command line) reaches relays only."""
    written = {name for path in PACKAGE.rglob("*.py") for name in knob_writes(path)}
    assert {"MXKV_LAUNCHER_LINK", "MXKV_ATTEMPT", "MXKV_GROUP_JOB", "MXKV_PS_NODES"} <= written
    assert written - set(KNOBS) == {"MXKV_RELAY_KEY"}


def test_internal_knobs_say_that_mxkv_launch_sets_them():
    internal = [name for name, knob in KNOBS.items() if knob.internal]
    assert internal == [
        "MXKV_GROUP_JOB",
        "MXKV_REJOIN",
        "MXKV_ATTEMPT",
        "MXKV_LAUNCHER_LINK",
        "MXKV_PS_NODES",
    ]
    assert all(KNOBS[name].doc.startswith("Set by") for name in internal)

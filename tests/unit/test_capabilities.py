"""One table says what each mode can do (mxkv_hybrid/capabilities.py): no module outside it
and modes/ names a mode, and the table agrees with the refusals config makes."""

import ast
import pathlib
from dataclasses import fields, replace
from typing import Iterator, Set, Tuple

import pytest
from mxnet import gluon
from mxnet.kvstore import KVStoreBase

import mxkv_hybrid
from mxkv_hybrid import capabilities, checkpoint, config
from mxkv_hybrid.capabilities import (
    CAPABILITIES,
    MODES,
    UNKNOWN_MODE,
    ModeCapabilities,
    capabilities_of,
    modes_with,
    modes_without,
    steps_together,
)
from mxkv_hybrid.comm.compression import QuantisedReducer
from mxkv_hybrid.errors import ConfigError

PACKAGE = pathlib.Path(mxkv_hybrid.__file__).parent
ALLOWED_TO_NAME_MODES = (PACKAGE / "modes", PACKAGE / "capabilities.py")


def _docstrings(tree: ast.AST) -> Set[int]:
    """The ids of the docstring constants of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def mode_literals(path: pathlib.Path) -> Iterator[Tuple[int, str]]:
    """(line, text) of every string constant in `path` equal to a mode's name, docstrings
    aside (an f-string's constant parts count when one equals a name)."""
    tree = ast.parse(path.read_text())
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in MODES and id(node) not in docstrings:
            yield node.lineno, node.value


def test_no_module_outside_the_table_and_modes_names_a_mode():
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(path == allowed or allowed in path.parents for allowed in ALLOWED_TO_NAME_MODES)
        for line, text in mode_literals(path)
    ]
    assert not found, "ask capabilities.py, or build the mode in modes/:\n" + "\n".join(found)


def test_the_checker_sees_literals_and_skips_docstrings(tmp_path):
    source = tmp_path / "example.py"
    source.write_text(
        '"""sync"""\ndef f(mode):\n    """async"""\n'
        '    return mode == "easgd" or f"{mode}" == f"lasgd" or "lasgd tau"\n'
    )
    assert list(mode_literals(source)) == [(4, "easgd"), (4, "lasgd")]


def test_every_mode_has_every_capability_documented():
    assert MODES == tuple(CAPABILITIES) == config.MODES
    names = [f.name for f in fields(ModeCapabilities)]
    for can in CAPABILITIES.values():
        assert all(isinstance(getattr(can, name), bool) for name in names)
    assert all(f.metadata["doc"].strip() for f in fields(ModeCapabilities))


def test_modes_are_listed_in_the_tables_order():
    assert modes_with("servers") == ("sync", "async", "easgd")
    assert modes_without("servers") == ("allreduce", "lasgd")
    assert modes_with("group_jobs_by_default") == ("async", "easgd")
    with pytest.raises(AttributeError):
        modes_with("no_such_capability")


def test_a_name_that_is_no_mode_may_use_servers_and_nothing_else():
    """What the launcher assumes of an MXKV_MODE it passes on to the ranks unchecked."""
    assert capabilities_of("bogus") is UNKNOWN_MODE
    assert [f.name for f in fields(UNKNOWN_MODE) if getattr(UNKNOWN_MODE, f.name)] == ["servers"]
    assert config.launcher_mode({"MXKV_MODE": " Bogus "}) == "bogus"
    assert config.launcher_mode({}) == "allreduce"


def test_which_ranks_step_together():
    assert [mode for mode in MODES if steps_together(mode, False)] == ["allreduce", "sync", "lasgd"]
    assert [mode for mode in MODES if steps_together(mode, True)] == [
        "allreduce",
        "sync",
        "easgd",
        "lasgd",
    ]


def _refused(**environ: str) -> bool:
    try:
        config.Config.from_environment(environ)
    except ConfigError:
        return True
    return False


@pytest.mark.parametrize("mode", MODES)
def test_config_refuses_a_knob_exactly_where_the_mode_lacks_it(mode):
    can = CAPABILITIES[mode]
    assert _refused(MXKV_MODE=mode, MXKV_TRANSPORT="rma") != can.rma_transport
    assert _refused(MXKV_MODE=mode, MXKV_OUTER="nesterov") != can.outer_optimizer
    assert _refused(MXKV_MODE=mode, MXKV_FRAGMENTS="2") != can.fragments
    assert _refused(MXKV_MODE=mode, MXKV_ASYNC_DAMPING="staleness") != can.async_damping
    assert _refused(MXKV_MODE=mode, MXKV_COMPRESS="1bit") != can.quantised_averages
    assert (
        _refused(MXKV_MODE=mode, MXKV_LASGD_OVERLAP="1", MXNET_ENGINE_TYPE="NaiveEngine")
        == can.overlapped_average
    )
    assert (config.separate_groups_refusal(mode, False) == "") == can.group_jobs


def test_a_few_facts():
    assert not CAPABILITIES["lasgd"].servers and not CAPABILITIES["allreduce"].servers
    assert modes_with("rma_transport") == ("easgd",)
    assert modes_with("outer_optimizer") == ("easgd", "lasgd")
    assert modes_with("updates_only_on_servers") == ("async",)
    assert modes_with("updates_on_store") == ("allreduce", "sync", "async")
    assert modes_without("compression_across_groups") == ("easgd", "lasgd")
    assert modes_without("checkpoints") == ("async",)
    assert modes_with("checkpoints_per_group") == ("easgd",)
    assert config.separate_groups_refusal("easgd", True) != ""
    assert config.separate_groups_refusal("easgd", False, "rma") != ""
    assert config.KNOBS["MXKV_MODE"].default == capabilities.ALLREDUCE


def _training(mode: str, monkeypatch) -> Tuple[gluon.Block, gluon.Trainer]:
    """A net and its Trainer on a one-rank hybrid store in `mode` (a world of one, no process
    started)."""
    monkeypatch.setenv("MXKV_MODE", mode)
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="hybrid")
    trainer._init_kvstore()
    return net, trainer


def _with_row(monkeypatch, mode: str, **changes: bool) -> None:
    """Changes `mode`'s row of the table for this test."""
    monkeypatch.setitem(CAPABILITIES, mode, replace(CAPABILITIES[mode], **changes))


@pytest.mark.parametrize("mode", ["allreduce", "lasgd"])  # the modes a world of one can run
def test_the_store_updates_weights_where_the_row_says(mode, monkeypatch):
    """KVStore.is_capable(OPTIMIZER), which MXNet's Trainer and _create_sparse_kvstore
    (row_sparse weights) ask, reads updates_on_store: flipping the row flips the answer."""
    can = CAPABILITIES[mode].updates_on_store
    _, trainer = _training(mode, monkeypatch)
    assert trainer._kvstore.is_capable(KVStoreBase.OPTIMIZER) == can
    _with_row(monkeypatch, mode, updates_on_store=not can)
    _, trainer = _training(mode, monkeypatch)
    assert trainer._kvstore.is_capable(KVStoreBase.OPTIMIZER) == (not can)


def test_checkpoints_are_refused_where_the_row_says_before_a_file_is_written(tmp_path, monkeypatch):
    net, trainer = _training("allreduce", monkeypatch)
    checkpoint.save(str(tmp_path / "kept"), net, trainer)
    _with_row(monkeypatch, "allreduce", checkpoints=False)
    with pytest.raises(
        ConfigError,
        match=r"checkpoint.save: in MXKV_MODE=allreduce the optimizer and its state live on "
        r"the parameter servers.* \(sync, easgd, lasgd\)",
    ):
        checkpoint.save(str(tmp_path / "refused"), net, trainer)
    assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("across_groups", [False, True])
def test_compression_quantises_where_the_row_says(across_groups, monkeypatch):
    """lasgd quantises only the warm-up's gradients (its averaging stays float32); given
    compression_across_groups, the store's own reducer would quantise instead."""
    _with_row(monkeypatch, "lasgd", compression_across_groups=across_groups)
    _, trainer = _training("lasgd", monkeypatch)
    store = trainer._kvstore
    store.set_gradient_compression({"type": "2bit", "threshold": 0.5})
    assert isinstance(store._reducer, QuantisedReducer) == across_groups
    assert isinstance(store.averaging.gradients, QuantisedReducer) != across_groups

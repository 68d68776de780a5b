"""The package leaves the choice of MXNet build to the user: its metadata requires `mxnet`
only under the extra `cpu`, and the version check accepts every 1.9 release and no other."""

import re
import sys
import types
from importlib import metadata

import pytest

from mxkv_hybrid.mxnet_version import require_mxnet


def requirement_name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()


def test_mxnet_is_required_only_under_the_extra_cpu():
    requirements = metadata.requires("mxkv_hybrid")
    on_mxnet = [r for r in requirements if requirement_name(r) == "mxnet"]
    assert on_mxnet, requirements
    for requirement in on_mxnet:
        assert re.search(r";\s*extra\s*==\s*['\"]cpu['\"]", requirement), requirement
    assert "cpu" in metadata.metadata("mxkv_hybrid").get_all("Provides-Extra")
    assert not [r for r in requirements if requirement_name(r).startswith("mxnet-")]


@pytest.mark.parametrize(
    "version, accepted", [("1.9.1", True), ("1.9.0", True), ("1.8.0", False), ("2.0.0", False)]
)
def test_every_1_9_release_and_no_other_is_accepted(monkeypatch, version, accepted):
    monkeypatch.setitem(
        sys.modules, "mxnet", types.SimpleNamespace(__version__=version, __file__="mxnet.py")
    )
    if accepted:
        require_mxnet()
    else:
        with pytest.raises(ImportError, match=f"this environment has MXNet {version}"):
            require_mxnet()

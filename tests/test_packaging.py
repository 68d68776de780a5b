"""The package leaves the choice of MXNet build to the user: it requires `mxnet` only
under the extra `cpu`, and without MXNet 1.9.x `import mxkv_hybrid` says how to install one."""

import re
import subprocess
import sys
import types
from importlib import metadata

import pytest

from mxkv_hybrid.mxnet_version import INSTALL_LINES, require_mxnet

# a meta-path finder that makes `import mxnet` fail as if MXNet were not installed
HIDE_MXNET = """
import sys
class HideMXNet:
    def find_spec(self, name, path=None, target=None):
        if name == "mxnet" or name.startswith("mxnet."):
            raise ModuleNotFoundError("No module named 'mxnet'", name="mxnet")
sys.meta_path.insert(0, HideMXNet())
"""


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


def import_error(prelude: str, tmp_path=None) -> str:
    """The last line of `import mxkv_hybrid; import mxnet` after `prelude`: MXNet is looked
    for at the first import and its version checked at the second."""
    script = prelude + "\nimport mxkv_hybrid\nimport mxnet\n"
    env_path = [str(tmp_path)] if tmp_path is not None else []
    job = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
        env={"PYTHONPATH": ":".join(env_path + sys.path[1:])},
    )
    assert job.returncode != 0, job.stdout
    last = job.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: mxkv_hybrid needs Apache MXNet 1.9.x"), job.stderr
    assert INSTALL_LINES in last and "mxnet-cu117==1.9.1" in last and "[cpu]" in last
    return last


def test_import_without_mxnet_names_both_install_lines():
    assert "No module named 'mxnet'" in import_error(HIDE_MXNET)


def test_import_with_another_mxnet_version_names_it(tmp_path):
    fake = tmp_path / "mxnet"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "2.0.0"\n')
    assert "this environment has MXNet 2.0.0" in import_error("", tmp_path)


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

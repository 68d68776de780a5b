"""`import mxkv_hybrid` in a fresh process without MXNet 1.9.x (none installed, or another
version) fails with one line that says how to install either build."""

import subprocess
import sys

from mxkv_hybrid.mxnet_version import INSTALL_LINES

# a meta-path finder that makes `import mxnet` fail as if MXNet were not installed
HIDE_MXNET = """
import sys
class HideMXNet:
    def find_spec(self, name, path=None, target=None):
        if name == "mxnet" or name.startswith("mxnet."):
            raise ModuleNotFoundError("No module named 'mxnet'", name="mxnet")
sys.meta_path.insert(0, HideMXNet())
"""


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

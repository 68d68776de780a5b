"""What a fresh interpreter loads, in child processes: mxkv-launch and its relays (every
module of launch/) load neither MXNet, MPI nor the ranks' layers, and the store and hooks are
installed whichever of mxnet and mxkv_hybrid is imported first."""

import pathlib
import subprocess
import sys
from typing import Iterator, Set, Tuple

import pytest

import mxkv_hybrid

PACKAGE = pathlib.Path(mxkv_hybrid.__file__).parent


def modules() -> Iterator[Tuple[Tuple[str, ...], pathlib.Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield (parts[:-1] if parts[-1] == "__init__" else parts), path


def _loaded_after(statements: str) -> Set[str]:
    """The modules a fresh interpreter holds after running `statements`."""
    code = f"{statements}\nimport sys\nprint('\\n'.join(sys.modules))"
    job = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(job.stdout.split())


def test_the_launchers_processes_load_neither_mxnet_nor_the_ranks_side():
    """mxkv-launch and its relays (every module of launch/) start without MXNet, MPI or
    the rank's layers: `import mxkv_hybrid` waits for MXNet's own import."""
    launch = [
        ".".join(("mxkv_hybrid", *m))
        for m, _ in modules()
        if m[:1] == ("launch",) and m[-1] != "__main__"
    ]
    loaded = _loaded_after("\n".join(f"import {name}" for name in launch))
    rank_side = ("mxkv_hybrid.comm", "mxkv_hybrid.kvstore", "mxkv_hybrid.integration")
    assert not {m for m in loaded if m.split(".")[0] in ("mxnet", "mpi4py", "numpy")}
    assert not {m for m in loaded if m.startswith(rank_side)}
    assert set(launch) <= loaded  # (the check imported them all)


@pytest.mark.parametrize(
    "imports",
    [
        "import mxnet\nimport mxkv_hybrid",
        "import mxkv_hybrid\nimport mxnet",
        "import mxkv_hybrid\nmxkv_hybrid.Hybrid",
        # MXNet first imported by a module of the package, half executed at that moment
        "from mxkv_hybrid.kvstore import Hybrid",
        "from mxkv_hybrid.integration.hooks import install",
    ],
)
def test_the_store_and_hooks_are_installed_whichever_is_imported_first(imports):
    _loaded_after(
        f"{imports}\nimport mxnet\n"
        "assert 'hybrid' in mxnet.kv.KVStoreBase.kv_registry\n"
        "assert hasattr(mxnet.kv.create, '_mxkv_original')\n"
        "assert hasattr(mxnet.gluon.Trainer.__init__, '_mxkv_original')"
    )

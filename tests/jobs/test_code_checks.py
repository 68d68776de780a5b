"""The checks a contributor runs in seconds, run by CI as tests (.ci/run runs the suite
only): ruff's lint and format check, mypy on the package, clang-format on csrc/. Their
settings are pyproject.toml's [tool.ruff] and [tool.mypy] and .clang-format; the tools
are this environment's (the `test` extra pins them)."""

import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT

TOOLS = Path(sys.executable).parent  # the venv's bin: ruff, mypy, clang-format
TIMEOUT = 300  # seconds; each takes a few (mypy the longest, ~10 s without its cache)


def check(tool: str, *arguments: str) -> None:
    """Runs `tool arguments` in the repository; fails with its output unless it passed."""
    path = TOOLS / tool
    if not path.exists():
        pytest.fail(f"{path} is missing: install the test extra (pip install -e '.[test]')")
    done = subprocess.run(
        [str(path), *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{tool} {' '.join(arguments)}:\n{done.stdout}{done.stderr}"


def test_ruff_finds_nothing():
    check("ruff", "check", "--no-cache")


def test_python_is_formatted_by_ruff():
    check("ruff", "format", "--check", "--no-cache")


@pytest.mark.skipif(sys.version_info < (3, 10), reason="mypy 2 runs on Python 3.10 and later")
def test_mypy_finds_nothing_in_the_package():
    check("mypy")


def test_csrc_is_clang_formatted():
    sources = sorted(
        str(p.relative_to(ROOT))
        for pattern in ("*.cpp", "*.h")
        for p in (ROOT / "csrc").rglob(pattern)
    )
    assert sources, "no C++ sources in csrc/"
    check("clang-format", "--dry-run", "-Werror", *sources)

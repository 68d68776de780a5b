"""Where the repository's parts are, for the tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
WORKERS = TESTS / "workers"  # the programs the tests' jobs run
LIBRARIES = TESTS / "libraries"  # third-party-like libraries the workers import
EXAMPLES = ROOT / "examples"
RESULTS = EXAMPLES / "benchmarks" / "results"
DOCS = ROOT / "docs"
LAUNCH = ROOT / "mxkv_hybrid" / "launch"

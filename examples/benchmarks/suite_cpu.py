"""Where the test suite's CPU goes: one whole run of pytest with every Python process it
starts (ranks, servers, relays, launchers, at any depth) writing its own CPU time when it
exits, then the time per kind of process and per tier, and how much of it is MXNet's import:

    python examples/benchmarks/suite_cpu.py [--label NAME] [-- PYTEST_ARGS...]

Each process is counted by a `sitecustomize` put first on PYTHONPATH (it records at exit:
argv, CPU seconds, whether it imported MXNet, the test that was running). A process killed
by a signal or ended by os._exit writes nothing: the run's whole CPU (every process reaped,
as the kernel counts it) is printed beside what the processes wrote. The import's cost is
measured in the same run: `python -c "import mxnet"` several times, before pytest starts.
Prints a table and writes suite_cpu.json (one entry per --label, the others kept)."""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List

RESULTS = Path(__file__).parent / "results"
REPOSITORY = Path(__file__).resolve().parents[2]
IMPORT_RUNS = 5
TIERS = ("unit", "jobs", "hosts")

# written at each process's exit to the file RECORDS names (one JSON line per process)
ACCOUNTING = """\
import atexit, json, os, resource, sys

def _record():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = json.dumps({
        "argv": sys.argv[:3],
        "cpu": usage.ru_utime + usage.ru_stime,
        "mxnet": "mxnet" in sys.modules,
        "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
    })
    with open(os.environ["SUITE_CPU_RECORDS"], "a") as records:
        records.write(line + "\\n")

if os.environ.get("SUITE_CPU_RECORDS"):
    atexit.register(_record)
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def import_cost() -> float:
    """Median CPU seconds of `python -c "import mxnet"`, a process of its own each time."""
    costs = []
    for _ in range(IMPORT_RUNS):
        before = children_cpu()
        subprocess.run([sys.executable, "-c", "import mxnet"], check=True)
        costs.append(children_cpu() - before)
    return statistics.median(costs)


def kind_of(argv: List[str]) -> str:
    """A process's kind: its module (-m) or its script's name."""
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    script = Path(argv[0]).name if argv else ""
    if script == "__main__.py":  # a package run by path: mxkv-launch's console script
        return f"{Path(argv[0]).parent.name}/__main__.py"
    return script or "python -c"


def tier_of(test: str) -> str:
    parts = test.split("/")
    return parts[1] if len(parts) > 2 and parts[1] in TIERS else "outside any test"


def file_of(test: str) -> str:
    return test.split("::")[0] or "outside any test"


def summarise(records: List[dict], key: Callable[[dict], str]) -> Dict[str, dict]:
    """CPU seconds, processes and MXNet imports per `key` of a record, most CPU first."""
    table: Dict[str, dict] = defaultdict(lambda: {"processes": 0, "cpu_s": 0.0, "mxnet": 0})
    for record in records:
        row = table[key(record)]
        row["processes"] += 1
        row["cpu_s"] += record["cpu"]
        row["mxnet"] += record["mxnet"]
    return dict(sorted(table.items(), key=lambda item: -item[1]["cpu_s"]))


def print_table(title: str, table: Dict[str, dict], rows: int) -> None:
    print(f"\n{title:<52} {'processes':>9} {'imports':>8} {'CPU s':>8}")
    for name, row in list(table.items())[:rows]:
        print(f"{name[-52:]:<52} {row['processes']:9d} {row['mxnet']:8d} {row['cpu_s']:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="head", help="this run's name in suite_cpu.json")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args()

    per_import = import_cost()
    print(f"import mxnet: {per_import:.2f} CPU-s (median of {IMPORT_RUNS})", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "sitecustomize.py").write_text(ACCOUNTING)
        records_file = Path(folder, "records.jsonl")
        env = dict(os.environ, SUITE_CPU_RECORDS=str(records_file))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
        before, started = children_cpu(), time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *args.pytest_args],
            check=False,
            env=env,
            cwd=REPOSITORY,
        )
        whole_cpu, wall = children_cpu() - before, time.monotonic() - started
        records = [json.loads(line) for line in records_file.read_text().splitlines()]
    by_kind = summarise(records, lambda r: kind_of(r["argv"]))
    by_tier = summarise(records, lambda r: tier_of(r["test"]))
    by_file = summarise(records, lambda r: file_of(r["test"]))
    written = sum(r["cpu"] for r in records)
    imports = sum(r["mxnet"] for r in records)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        check=True,
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
    ).stdout.strip()
    result = {
        "commit": commit,
        "pytest_exit": run.returncode,
        "wall_s": wall,
        "whole_cpu_s": whole_cpu,
        "written_cpu_s": written,
        "processes": len(records),
        "mxnet_imports": imports,
        "import_cpu_s": per_import,
        "import_share": imports * per_import / whole_cpu,
        "by_kind": by_kind,
        "by_tier": by_tier,
        "by_file": by_file,
    }
    print(
        f"\npytest exit {run.returncode}, {wall:.0f} s; CPU of every process reaped "
        f"{whole_cpu:.0f} s, of those that wrote theirs {written:.0f} s ({len(records)})"
    )
    print(
        f"MXNet imported {imports} times: {imports * per_import:.0f} CPU-s "
        f"({result['import_share']:.0%} of the whole)"
    )
    print_table("kind of process", by_kind, 20)
    print_table("tier", by_tier, len(by_tier))
    print_table("test file", by_file, 20)
    path = args.out / "suite_cpu.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else {}
    runs[args.label] = result
    path.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(f"\nwrote {path}")
    sys.exit(run.returncode)


if __name__ == "__main__":
    main()

"""Where the test suite's CPU goes: one whole run of pytest, the CPU time of every process
it starts (ranks, servers, relays, launchers, MPI's, at any depth, killed ones included),
per kind of process, tier and test file, and how much of it is MXNet's import:

    python examples/benchmarks/suite_cpu.py [--label NAME] [-- PYTEST_ARGS...]

The kernel counts each process's CPU when it exits (BSD process accounting, acct(2): root
only, system-wide, so run it on a quiet machine). A `sitecustomize` put first on PYTHONPATH
names each Python process: at its start it writes its command line and the test that
was running, at a clean exit whether it imported MXNet. The import's cost is measured in
the same run: `python -c "import mxnet"` several times, before pytest starts. Prints a
table and writes suite_cpu.json (one entry per --label, the others kept)."""

import argparse
import ctypes
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List

from suite_tiers import TIERS

RESULTS = Path(__file__).parent / "results"
REPOSITORY = Path(__file__).resolve().parents[2]
IMPORT_RUNS = 5
# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid,
# btime, etime, then comp_t utime, stime, mem, io, rw, minflt, majflt, swaps, comm[16]
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
FORKED = 0x01  # ac_flag AFORK: forked, never exec'd

# each Python process writes one JSON line at its start and one at a clean exit
NAMING = """\
import atexit, json, os, sys

def _write(**fields):
    with open(os.environ["SUITE_CPU_RECORDS"], "a") as records:
        records.write(json.dumps(dict(pid=os.getpid(), **fields)) + "\\n")

if os.environ.get("SUITE_CPU_RECORDS"):
    with open("/proc/self/cmdline", "rb") as cmdline:
        _argv = cmdline.read().decode(errors="replace").split("\\0")[1:5]
    _write(argv=_argv, test=os.environ.get("PYTEST_CURRENT_TEST", ""))
    atexit.register(lambda: _write(mxnet="mxnet" in sys.modules))
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
    """A Python process's kind from its arguments after the interpreter's name: its
    module (-m), its script's name, or the console script's."""
    if argv[:2] == ["-m", "mxkv_hybrid.run"] and len(argv) > 2:  # a rank: what it runs
        return kind_of(argv[2:])
    if argv[:1] == ["-m"] and len(argv) > 1:
        return argv[1]
    return Path(argv[0]).name if argv and not argv[0].startswith("-") else "python -c"


def read_accounting(path: Path) -> List[dict]:
    """The kernel's records: pid, ppid, CPU seconds, command, forked, killed."""
    tick = os.sysconf("SC_CLK_TCK")

    def seconds(comp_t: int) -> float:  # 13-bit mantissa, 3-bit base-8 exponent, in ticks
        return ((comp_t & 0x1FFF) << (((comp_t >> 13) & 0x7) * 3)) / tick

    processes = []
    data = path.read_bytes()
    for offset in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        flag, _, _, exitcode, _, _, pid, ppid, _, _, utime, stime, *_, command = (
            ACCT_V3.unpack_from(data, offset)
        )
        processes.append(
            {
                "pid": pid,
                "ppid": ppid,
                "cpu": seconds(utime) + seconds(stime),
                "command": command.split(b"\0")[0].decode(errors="replace"),
                "forked": bool(flag & FORKED),
                "killed": (exitcode & 0x7F) != 0,
            }
        )
    return processes


def name_processes(accounted: List[dict], records: List[dict]) -> List[dict]:
    """Each accounted process with its kind, its test and whether it imported MXNet: a
    Python process by its start record, a fork of one (a keeper) by its parent's, any
    other (MPI's) by its command, in the test of its nearest Python ancestor."""
    starts = {r["pid"]: r for r in records if "argv" in r}
    imported = {r["pid"] for r in records if r.get("mxnet")}
    parents = {process["pid"]: process["ppid"] for process in accounted}

    def test_above(pid: int) -> str:
        for _ in range(8):
            pid = parents.get(pid, 0)
            if pid in starts:
                return starts[pid]["test"]
        return ""

    named = []
    for process in accounted:
        start = starts.get(process["pid"])
        parent = starts.get(process["ppid"]) if process["forked"] else None
        if start is not None:
            kind, test = kind_of(start["argv"]), start["test"]
        elif parent is not None:
            kind, test = f"{kind_of(parent['argv'])} (forked)", parent["test"]
        else:
            kind, test = f"[{process['command']}]", test_above(process["pid"])
        mxnet = start is not None and process["pid"] in imported
        named.append(dict(process, kind=kind, test=test, mxnet=mxnet))
    return named


def tier_of(test: str) -> str:
    parts = test.split("/")
    return parts[1] if len(parts) > 2 and parts[1] in TIERS else "outside any test"


def file_of(test: str) -> str:
    return test.split("::")[0] or "outside any test"


def summarise(records: List[dict], key: Callable[[dict], str]) -> Dict[str, dict]:
    """CPU seconds, processes and MXNet imports per `key` of a record, most CPU first."""
    table: Dict[str, dict] = defaultdict(
        lambda: {"processes": 0, "cpu_s": 0.0, "mxnet": 0, "killed": 0}
    )
    for record in records:
        row = table[key(record)]
        row["processes"] += 1
        row["cpu_s"] += record["cpu"]
        row["mxnet"] += record["mxnet"]
        row["killed"] += record["killed"]
    return dict(sorted(table.items(), key=lambda item: -item[1]["cpu_s"]))


def print_table(title: str, table: Dict[str, dict], rows: int) -> None:
    print(f"\n{title:<52} {'processes':>9} {'killed':>7} {'imports':>8} {'CPU s':>8}")
    for name, row in list(table.items())[:rows]:
        print(
            f"{name[-52:]:<52} {row['processes']:9d} {row['killed']:7d} {row['mxnet']:8d} "
            f"{row['cpu_s']:8.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="head", help="this run's name in suite_cpu.json")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args()

    per_import = import_cost()
    print(f"import mxnet: {per_import:.2f} CPU-s (median of {IMPORT_RUNS})", flush=True)
    libc = ctypes.CDLL(None, use_errno=True)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "sitecustomize.py").write_text(NAMING)
        records_file, accounting = Path(folder, "records.jsonl"), Path(folder, "pacct")
        accounting.touch()
        if libc.acct(str(accounting).encode()) != 0:
            sys.exit(f"acct(2): {os.strerror(ctypes.get_errno())}: run as root")
        env = dict(os.environ, SUITE_CPU_RECORDS=str(records_file))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
        before, started = children_cpu(), time.monotonic()
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pytest", *args.pytest_args],
                check=False,
                env=env,
                cwd=REPOSITORY,
            )
        finally:
            libc.acct(None)
        whole_cpu, wall = children_cpu() - before, time.monotonic() - started
        records = [json.loads(line) for line in records_file.read_text().splitlines()]
        processes = name_processes(read_accounting(accounting), records)
    by_kind = summarise(processes, lambda r: r["kind"])
    by_tier = summarise(processes, lambda r: tier_of(r["test"]))
    by_file = summarise(processes, lambda r: file_of(r["test"]))
    accounted = sum(r["cpu"] for r in processes)
    imports = sum(r["mxnet"] for r in processes)
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
        "accounted_cpu_s": accounted,
        "processes": len(processes),
        "killed": sum(r["killed"] for r in processes),
        "mxnet_imports": imports,
        "import_cpu_s": per_import,
        "import_share": imports * per_import / accounted,
        "by_kind": by_kind,
        "by_tier": by_tier,
        "by_file": by_file,
    }
    print(
        f"\npytest exit {run.returncode}, {wall:.0f} s; CPU of the processes pytest reaped "
        f"{whole_cpu:.0f} s; of every process that ended meanwhile {accounted:.0f} s "
        f"({len(processes)}, {result['killed']} killed)"
    )
    print(
        f"MXNet imported at least {imports} times (the processes that ended cleanly): "
        f"{imports * per_import:.0f} CPU-s ({result['import_share']:.0%} of the whole)"
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

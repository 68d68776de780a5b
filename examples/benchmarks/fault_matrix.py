"""The whole fault matrix (tests/tables/fault_matrix.py) on emulated hosts, as a table and JSON:
for every cell, whether the job ended as the cell says, how long after the fault the
launcher named the member, and how long until the job was over.

    python examples/benchmarks/fault_matrix.py [--out examples/benchmarks/results] [-k EXPR]

It runs `pytest tests/hosts/test_fault_matrix.py -m fault_matrix` (every cell, not only the CI
sample) with FAULT_MATRIX_RESULTS set, so each cell appends its figures, then prints the
table and writes fault_matrix.json to --out. Needs root (network namespaces), as the tests
do; takes about 4 minutes on 2 cores.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[2]


def seconds(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.1f}"


def table(records: List[dict]) -> str:
    header = f"{'fault':<14} {'path':<8} {'mode':<9} {'moment':<18} {'exit':>4} {'named':>6}"
    rows = [header + f" {'ended':>6}  held"]
    for r in records:
        held = "yes" if not r["problems"] else "NO: " + r["problems"][0].splitlines()[0]
        rows.append(
            f"{r['fault']:<14} {r['path']:<8} {r['mode']:<9} {r['moment']:<18} {r['exit']:>4} "
            f"{seconds(r['named_after_s']):>6} {seconds(r['ended_after_s']):>6}  {held}"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "examples" / "benchmarks" / "results"))
    parser.add_argument("-k", default="", help="only the cells pytest's -k selects")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        results = os.path.join(scratch, "cells.jsonl")
        command = [sys.executable, "-m", "pytest", "tests/hosts/test_fault_matrix.py"]
        command += ["-m", "fault_matrix", "-q", "-p", "no:cacheprovider"]
        command += ["-k", args.k] if args.k else []
        done = subprocess.run(
            command, cwd=ROOT, env=dict(os.environ, FAULT_MATRIX_RESULTS=results), check=False
        )
        with open(results) as f:
            records = [json.loads(line) for line in f]
    print(table(records))
    held = sum(not r["problems"] for r in records)
    print(f"{held} of {len(records)} cells held (pytest exit status {done.returncode})")
    out = Path(args.out) / "fault_matrix.json"
    summary = {"cells": records, "held": held, "pytest_exit": done.returncode}
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

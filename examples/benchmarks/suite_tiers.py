"""What the test suite costs, tier by tier, from pytest's JUnit XML of whole runs:

    python -m pytest --junitxml=run.xml            # one whole run, nothing else on the machine
    python examples/benchmarks/suite_tiers.py --run after run.xml [--run before old.xml ...]

A test's tier is the folder it lives in (tests/unit, tests/jobs, tests/hosts); a run of the
suite from before the tiers had folders gives its files' tiers by `--tiers FILE.json`
({"tests/test_x.py": {"test_name": "unit"|"jobs"|"hosts"}}). Prints a table and writes
suite_tiers.json (each run's tests and seconds per tier, and the whole run's seconds as
pytest counted them); the runs the file already holds are kept unless a --run names them
again."""

import argparse
import json
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path
from typing import Dict, Optional

TIERS = ("unit", "jobs", "hosts")


def tier_of(classname: str, name: str, old_tiers: Optional[Dict[str, Dict[str, str]]]) -> str:
    """The tier of a JUnit test case: its folder, or the old run's map of file and test."""
    parts = classname.split(".")
    if len(parts) > 2 and parts[1] in TIERS:
        return parts[1]
    if old_tiers is None:
        raise SystemExit(f"{classname}::{name} is in no tier folder: give --tiers")
    return old_tiers["/".join(parts) + ".py"][name.split("[")[0]]


def summary(junit: Path, old_tiers: Optional[Dict[str, Dict[str, str]]]) -> dict:
    """Tests and seconds per tier of one run, and the run's own seconds."""
    root = ElementTree.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None, f"{junit}: no testsuite"
    tests: Dict[str, int] = defaultdict(int)
    seconds: Dict[str, float] = defaultdict(float)
    for case in suite.iter("testcase"):
        tier = tier_of(case.get("classname", ""), case.get("name", ""), old_tiers)
        tests[tier] += 1
        seconds[tier] += float(case.get("time", 0))
    return {
        "seconds": round(float(suite.get("time", 0)), 1),
        "failures": int(suite.get("failures", 0)) + int(suite.get("errors", 0)),
        "tiers": {t: {"tests": tests[t], "seconds": round(seconds[t], 1)} for t in TIERS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", nargs=2, action="append", metavar=("LABEL", "JUNIT_XML"), required=True
    )
    parser.add_argument("--tiers", type=Path, help="the old run's tiers, for a run before folders")
    parser.add_argument("--note", action="append", default=[], metavar="LABEL=TEXT")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    old_tiers = json.loads(args.tiers.read_text()) if args.tiers else None
    notes = dict(note.split("=", 1) for note in args.note)
    results = args.out / "suite_tiers.json"
    runs = json.loads(results.read_text())["runs"] if results.exists() else {}
    for label, junit in args.run:
        runs[label] = dict(summary(Path(junit), old_tiers), note=notes.get(label, ""))
    print(f"{'run':<10}" + "".join(f"{t:>16}" for t in TIERS) + f"{'whole run':>12}")
    for label, run in runs.items():
        cells = "".join(
            f"{run['tiers'][t]['tests']:>6} {run['tiers'][t]['seconds']:>7.0f} s  " for t in TIERS
        )
        print(f"{label:<10}{cells}{run['seconds']:>8.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()

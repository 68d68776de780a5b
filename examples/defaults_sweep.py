"""The sweeps a knob's default is chosen from: each candidate value of the knob, switched on
with nothing else changed, trained by examples/convergence.py beside `allreduce` on the
same seeds, for every task and number of groups asked for.

    python examples/defaults_sweep.py MXKV_ASYNC_DAMPING [--tasks digits mnist1d]
        [--groups 2 4] [--seeds 42 1 2] [--links 0 50]

A row is a task, a number of groups and a link between the groups (Mbit/s, 0: none; as
convergence.py throttles it). A default is good when its mean final accuracy (over the
seeds) is within --within points of allreduce's on the same link in every row. Prints a
table, and writes defaults_sweep.json (each knob's rows; rows of other knobs and settings
swept before are kept) and defaults_sweep.png (one panel per knob: each value's gap to
allreduce, in points, per row) to --out."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, NamedTuple

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "benchmarks", "results")


class Sweep(NamedTuple):
    """A knob's candidates, each a configuration of examples/convergence.py ({} the value)."""

    configuration: str
    values: List[str]


SWEEPS: Dict[str, Sweep] = {
    "MXKV_ASYNC_DAMPING": Sweep("async damping={}", ["none", "staleness", "momentum"]),
}
BASELINE = "allreduce"


def convergence(
    task: str, groups: int, seeds: List[int], links: List[float], configurations: List[str]
) -> dict:
    """examples/convergence.py's results of `configurations` (and their summary)."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            os.path.join(HERE, "convergence.py"),
            "--task",
            task,
            "--groups",
            str(groups),
            "--seeds",
            *map(str, seeds),
            "--links",
            *map(str, links),
            "--out",
            out,
            "--configurations",
            *configurations,
        ]
        subprocess.run(command, check=True)
        with open(os.path.join(out, f"convergence_{task}.json")) as f:
            return json.load(f)


def rows_of(knob: str, task: str, groups: int, summary: List[dict]) -> List[dict]:
    """One row per value and link: its accuracies and its gap to the baseline's on that
    link, in points."""
    found = {(row["configuration"], row["link_mbps"]): row for row in summary}
    sweep = SWEEPS[knob]
    rows = []
    links = sorted({row["link_mbps"] for row in summary})
    for link, value in ((link, value) for link in links for value in sweep.values):
        row = found[(sweep.configuration.format(value), link)]
        baseline = found[(BASELINE, link)]["mean_final_accuracy"]
        rows.append(
            {
                "value": value,
                "task": task,
                "groups": groups,
                "link_mbps": link,
                "seeds": row["seeds"],
                "accuracies": row["final_accuracy"],
                "mean_accuracy": row["mean_final_accuracy"],
                "allreduce_mean_accuracy": baseline,
                "gap_points": 100 * (row["mean_final_accuracy"] - baseline),
            }
        )
    return rows


def setting_of(row: dict) -> tuple:
    """The row's task, groups and link: a later sweep of the same setting replaces it."""
    return row["task"], row["groups"], row["link_mbps"]


def is_within(row: dict, within: float) -> bool:
    """Whether the row's value is no more than `within` points short of the baseline."""
    return row["gap_points"] >= -within


def table(knob: str, rows: List[dict], within: float) -> str:
    lines = [f"{knob}: mean final accuracy over the seeds, and its gap to {BASELINE}"]
    lines.append(
        f"{'value':<12}{'task':<9}{'groups':>7}{'link':>7}{'accuracy':>10}{'gap':>9}  verdict"
    )
    for row in rows:
        verdict = "within" if is_within(row, within) else "short"
        lines.append(
            f"{row['value']:<12}{row['task']:<9}{row['groups']:>7}{row['link_mbps']:>7g}"
            f"{row['mean_accuracy']:>10.3f}"
            f"{row['gap_points']:>+8.1f}p  {verdict}"
        )
    good = [
        value
        for value in SWEEPS[knob].values
        if all(is_within(r, within) for r in rows if r["value"] == value)
    ]
    lines.append(
        f"within {within:g} points of {BASELINE} in every row: {', '.join(good) or 'none'}"
    )
    return "\n".join(lines)


def plot(results: Dict[str, dict], path: str, within: float) -> None:
    """One panel per knob, each value's gap per row (task, groups, link); one legend
    outside the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    knobs = sorted(results)
    figure, axes = plt.subplots(1, len(knobs), figsize=(max(6, 5 * len(knobs)), 5), squeeze=False)
    for axis, knob in zip(axes[0], knobs):
        rows = results[knob]["rows"]
        values = SWEEPS[knob].values if knob in SWEEPS else sorted({r["value"] for r in rows})
        for setting in sorted({setting_of(r) for r in rows}):
            gaps = {r["value"]: r["gap_points"] for r in rows if setting_of(r) == setting}
            task, groups, link = setting
            label = f"{task}, {groups} groups" + (f", {link:g} Mbit/s" if link else "")
            axis.plot(values, [gaps.get(v) for v in values], marker="o", label=label)
        axis.axhspan(-within, within, color="green", alpha=0.1)
        axis.axhline(0, color="grey", linewidth=0.8)
        axis.set_title(knob)
        axis.set_xlabel("value")
        axis.set_ylabel(f"accuracy - {BASELINE}'s (points)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    columns = 2
    figure.legend(handles, labels, loc="lower center", ncol=columns, frameon=False)
    figure.tight_layout(rect=(0, 0.06 * -(-len(labels) // columns) + 0.02, 1, 1))
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("knob", choices=sorted(SWEEPS))
    parser.add_argument("--tasks", nargs="+", default=["digits", "mnist1d"])
    parser.add_argument("--groups", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--links", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--within", type=float, default=1.0, help="points (default 1)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    sweep = SWEEPS[args.knob]
    configurations = [BASELINE] + [sweep.configuration.format(v) for v in sweep.values]
    rows: List[dict] = []
    for task in args.tasks:
        for groups in args.groups:
            print(f"defaults_sweep: {args.knob} on {task}, {groups} groups", flush=True)
            result = convergence(task, groups, args.seeds, args.links, configurations)
            rows += rows_of(args.knob, task, groups, result["summary"])
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "defaults_sweep.json")
    results = {}
    if os.path.exists(path):
        with open(path) as f:
            results = json.load(f)
    swept = {setting_of(row) for row in rows}
    kept = [r for r in results.get(args.knob, {}).get("rows", []) if setting_of(r) not in swept]
    rows = kept + rows
    print(table(args.knob, rows, args.within))
    results[args.knob] = {
        "configuration": sweep.configuration,
        "within_points": args.within,
        "rows": rows,
    }
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    plot(results, path.replace(".json", ".png"), args.within)
    print(f"wrote {path} and .png")


if __name__ == "__main__":
    main()

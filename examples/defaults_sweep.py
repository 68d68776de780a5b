"""The sweeps a knob's default is chosen from: each candidate value of the knob, switched on
with nothing else changed, trained by examples/convergence.py beside `allreduce` on the
same seeds, for every task and number of groups asked for.

    python examples/defaults_sweep.py MXKV_ASYNC_DAMPING [--tasks digits mnist1d]
        [--groups 2 4] [--seeds 42 1 2] [--links 0 50] [--taus 8 32 128] [--values V ...]

A row is a task, a number of groups, a link between the groups (Mbit/s, 0: none; as
convergence.py throttles it) and, for the sweeps of an averaging mode, its MXKV_TAU. A
value is good when its mean final accuracy (over the seeds) is within --within points of
allreduce's on the same link in every row. A sweep named after a quantity rather than a
knob (the servers' momentum under async) measures what a rule the package computes
should give. Prints a table, and writes defaults_sweep.json (each sweep's rows; rows of
other sweeps and settings swept before are kept) and defaults_sweep.png (one panel per
sweep: each value's gap to allreduce, in points, per row) to --out."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, NamedTuple, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "benchmarks", "results")
sys.path.insert(0, os.path.join(HERE, "benchmarks"))

from figure_legend import legend_below  # noqa: E402


class Sweep(NamedTuple):
    """A knob's candidates, each a configuration of examples/convergence.py ({value} the
    candidate, {tau} each of the taus)."""

    knob: str  # the knob the values are of ("": the script's SGD momentum)
    configuration: str
    values: List[str]
    taus: Tuple[int, ...] = ()


OUTER = ["0.9", "0.7", "0.5", "0.3", "0"]
OUTER_LRS = ["1", "0.7", "0.5", "0.3"]
RULE = "rule"  # a candidate that leaves the knob unset: the package's rule decides
SWEEPS: Dict[str, Sweep] = {
    "MXKV_ASYNC_DAMPING": Sweep(
        "MXKV_ASYNC_DAMPING", "async damping={value}", ["none", "staleness", "momentum", "rate"]
    ),
    # the servers' SGD momentum under async, set directly (damping none; the script's 0.9
    # is allreduce's): what MXKV_ASYNC_DAMPING's rule should give for G groups (rate: 0.8
    # for 2, 0.6 for 4; momentum: 0.4, 0.15)
    "async_servers_momentum": Sweep(
        "",
        "async damping=none momentum={value}",
        ["0.85", "0.8", "0.7", "0.65", "0.6", "0.4", "0.15"],
    ),
    # the outer optimizer switched on alone: MXKV_LASGD_OVERLAP's rule (blocking past tau 4;
    # the tau 8 rows in the results ran overlapped, the rule's choice before), DiLoCo's lr 0.7
    "MXKV_OUTER_MOMENTUM": Sweep(
        "MXKV_OUTER_MOMENTUM",
        "lasgd tau={tau} outer=nesterov outer_momentum={value}",
        OUTER,
        taus=(8, 32, 128),
    ),
    # the outer optimizer's learning rate, its momentum the rule max(0, 1 - lr)
    "MXKV_OUTER_LR": Sweep(
        "MXKV_OUTER_LR",
        "lasgd tau={tau} outer=nesterov outer_lr={value}",
        OUTER_LRS,
        taus=(8, 32, 128),
    ),
    "MXKV_OUTER_LR easgd": Sweep(
        "MXKV_OUTER_LR",
        "easgd tau={tau} outer=nesterov outer_lr={value}",
        OUTER_LRS,
        taus=(8, 32, 128),
    ),
    "MXKV_OUTER_MOMENTUM easgd": Sweep(
        "MXKV_OUTER_MOMENTUM",
        "easgd tau={tau} outer=nesterov outer_momentum={value}",
        OUTER,
        taus=(8, 32, 128),
    ),
    "MXKV_TAU lasgd": Sweep("MXKV_TAU", "lasgd tau={value}", ["4", "8", "16", "32", "64", "128"]),
    "MXKV_TAU easgd": Sweep("MXKV_TAU", "easgd tau={value}", ["4", "8", "16", "32", "64", "128"]),
    # easgd before its rules for long periods: the moving rate and the local steps' rate
    # of short ones (alpha 0.1, the script's learning rate)
    "MXKV_TAU easgd alpha 0.1 scale 1": Sweep(
        "MXKV_TAU", "easgd tau={value} alpha=0.1 lr_scale=1", ["8", "32", "128"]
    ),
    # easgd's moving rate: the paper's beta / groups (0.45 for 2 groups, 0.225 for 4) and
    # fixed values (the rule, min(0.1, beta / groups), is 0.1 for 2 to 9 groups)
    "MXKV_EASGD_ALPHA": Sweep(
        "MXKV_EASGD_ALPHA",
        "easgd tau={tau} alpha={value}",
        ["0.45", "0.225", "0.1", "0.05"],
        taus=(4, 16),
    ),
    # lasgd's overlapped average is applied a period after it started (local_sgd.py): the
    # same bytes, the model it brings a period stale
    "MXKV_LASGD_OVERLAP": Sweep(
        "MXKV_LASGD_OVERLAP", "lasgd tau={tau} overlap={value}", ["1", "0"], taus=(8, 32, 128)
    ),
    "MXKV_LOCAL_LR_SCALE": Sweep(
        "MXKV_LOCAL_LR_SCALE",
        "lasgd tau={tau} lr_scale={value}",
        [RULE, "1", "0.71", "0.5"],
        taus=(8, 32, 128),
    ),
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


def configurations_of(
    sweep: Sweep, taus: List[int], values: Optional[List[str]] = None
) -> List[Tuple[str, Optional[int], str]]:
    """(value, tau, configuration) for every candidate (`values`, else the sweep's; tau None
    where the sweep has none); the candidate RULE drops the setting it would fill in."""
    return [
        (value, tau, configuration_of(sweep, value, tau))
        for tau in (taus if sweep.taus else [None])
        for value in (values or sweep.values)
    ]


def configuration_of(sweep: Sweep, value: str, tau: Optional[int]) -> str:
    """The configuration of one candidate at one tau."""
    words = sweep.configuration.split()
    if value == RULE:
        words = [word for word in words if "{value}" not in word]
    return " ".join(words).format(value=value, tau=tau)


def rows_of(
    knob: str,
    task: str,
    groups: int,
    summary: List[dict],
    taus: List[int] = (),
    values: Optional[List[str]] = None,
) -> List[dict]:
    """One row per value (`values`, else the sweep's), tau and link: its accuracies and its
    gap to the baseline's on that link, in points."""
    found = {(row["configuration"], row["link_mbps"]): row for row in summary}
    rows = []
    links = sorted({row["link_mbps"] for row in summary})
    for link in links:
        for value, tau, configuration in configurations_of(SWEEPS[knob], list(taus), values):
            row = found[(configuration, link)]
            baseline = found[(BASELINE, link)]["mean_final_accuracy"]
            rows.append(
                {
                    "value": value,
                    "task": task,
                    "groups": groups,
                    "tau": tau,
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
    """The row's task, groups, tau and link: a later sweep of the same setting replaces
    it."""
    return row["task"], row["groups"], row.get("tau"), row["link_mbps"]


def is_within(row: dict, within: float) -> bool:
    """Whether the row's value is no more than `within` points short of the baseline."""
    return row["gap_points"] >= -within


def table(knob: str, rows: List[dict], within: float) -> str:
    lines = [f"{knob}: mean final accuracy over the seeds, and its gap to {BASELINE}"]
    lines.append(
        f"{'value':<12}{'task':<9}{'groups':>7}{'tau':>5}{'link':>7}{'accuracy':>10}"
        f"{'gap':>9}  verdict"
    )
    for row in rows:
        verdict = "within" if is_within(row, within) else "short"
        lines.append(
            f"{row['value']:<12}{row['task']:<9}{row['groups']:>7}{row.get('tau') or '':>5}"
            f"{row['link_mbps']:>7g}"
            f"{row['mean_accuracy']:>10.3f}"
            f"{row['gap_points']:>+8.1f}p  {verdict}"
        )
    settings = {setting_of(r) for r in rows}  # a value good in every row it ran in all
    good = [
        value
        for value in SWEEPS[knob].values
        if {setting_of(r) for r in rows if r["value"] == value} == settings
        and all(is_within(r, within) for r in rows if r["value"] == value)
    ]
    lines.append(
        f"within {within:g} points of {BASELINE} in every row: {', '.join(good) or 'none'}"
    )
    return "\n".join(lines)


def label_of(setting: tuple) -> str:
    task, groups, tau, link = setting
    label = f"{task}, {groups} groups" + (f", tau {tau}" if tau else "")
    return label + (f", {link:g} Mbit/s" if link else "")


def plot(results: Dict[str, dict], path: str, within: float) -> None:
    """One panel per sweep, three to a row: each value's gap per row (task, groups, tau,
    link), a row's colour the same in every panel; one legend below the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(results)
    settings = sorted({setting_of(r) for name in names for r in results[name]["rows"]}, key=str)
    palette = plt.get_cmap("tab10" if len(settings) <= 10 else "tab20")
    colours = {setting: palette(i % palette.N) for i, setting in enumerate(settings)}
    columns = min(3, len(names))
    rows_of_panels = -(-len(names) // columns)
    figure, axes = plt.subplots(
        rows_of_panels, columns, figsize=(5 * columns, 4 * rows_of_panels), squeeze=False
    )
    for axis, name in zip(axes.flat, names):
        rows = results[name]["rows"]
        swept = SWEEPS.get(name.split(",")[0])  # "KNOB, what differed": kept rows of a sweep
        values = swept.values if swept else sorted({r["value"] for r in rows})
        for setting in sorted({setting_of(r) for r in rows}, key=str):
            gaps = {r["value"]: r["gap_points"] for r in rows if setting_of(r) == setting}
            axis.plot(
                values,
                [gaps.get(v) for v in values],
                marker="o",
                color=colours[setting],
                label=label_of(setting),
            )
        axis.axhspan(-within, within, color="green", alpha=0.1)
        axis.axhline(0, color="grey", linewidth=0.8)
        axis.set_title(name)
        axis.set_xlabel("value")
        axis.set_ylabel(f"accuracy - {BASELINE}'s (points)")
    for axis in list(axes.flat)[len(names) :]:
        axis.set_visible(False)
    legend_below(figure, axes.flat, columns=3)
    figure.savefig(path, dpi=110, bbox_inches="tight")  # the canvas grows to the legend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("knob", choices=sorted(SWEEPS))
    parser.add_argument("--tasks", nargs="+", default=["digits", "mnist1d"])
    parser.add_argument("--groups", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--links", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument(
        "--taus", type=int, nargs="+", help="MXKV_TAU of an averaging sweep (its own unless given)"
    )
    parser.add_argument(
        "--values",
        nargs="+",
        help="the candidates to run (the sweep's unless given); the file keeps the rows of "
        "the others",
    )
    parser.add_argument("--within", type=float, default=1.0, help="points (default 1)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    sweep = SWEEPS[args.knob]
    taus = args.taus or list(sweep.taus)
    configurations = [BASELINE] + [c for _v, _t, c in configurations_of(sweep, taus, args.values)]
    rows: List[dict] = []
    for task in args.tasks:
        for groups in args.groups:
            print(f"defaults_sweep: {args.knob} on {task}, {groups} groups", flush=True)
            result = convergence(task, groups, args.seeds, args.links, configurations)
            rows += rows_of(args.knob, task, groups, result["summary"], taus, args.values)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "defaults_sweep.json")
    results = {}
    if os.path.exists(path):
        with open(path) as f:
            results = json.load(f)

    def replaced(row: dict) -> tuple:  # a row of the same setting (and value, with --values)
        return (setting_of(row), row["value"] if args.values else None)

    swept = {replaced(row) for row in rows}
    kept = [r for r in results.get(args.knob, {}).get("rows", []) if replaced(r) not in swept]
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

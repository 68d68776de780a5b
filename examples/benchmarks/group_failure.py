"""What losing one group costs when every group is its own MPI job (`mxkv-launch
--group-jobs`, MXKV_MODE=easgd), with and without the lost group rejoining, against the
same run undisturbed, side by side.

    python examples/benchmarks/group_failure.py [--ranks 6] [--group-size 2] [--repeats 3]

Every run trains the digits CNN (tests/workers/group_job_digits.py: each rank its shard,
`consensus` at the end). `lost` kills group 1's first rank at its --kill-step-th step and
does not restart it: the other groups train on and, at the end, go on without it once
the launcher gave it up (MXKV_PS_TIMEOUT without progress bounds that wait). `rejoined`
restarts it (--restarts 1): it re-enters ps-lite after PS_HEARTBEAT_TIMEOUT + 2 s and
trains, from the centre, the steps it had left (it skips the steps the servers recorded
for it: mxkv_hybrid.steps_done). The runs alternate; the table shows medians of wall
time, the group-steps reached (the last step of every rank that finished, over the ranks
per group), the group-steps trained by the last start of each group that finished, and
the consensus accuracy. Writes group_failure.json
and group_failure.png to --out.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

WORKER = Path(__file__).resolve().parents[2] / "tests" / "workers" / "group_job_digits.py"
CONFIGURATIONS = ("undisturbed", "lost", "rejoined")


def run(configuration: str, args: argparse.Namespace) -> Dict[str, float]:
    """One job; its wall time, the group-steps reached and trained, and the consensus
    accuracy."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(
            os.environ, MXKV_MODE="easgd", OMP_NUM_THREADS="1", MXKV_PS_TIMEOUT=str(args.ps_timeout)
        )
        options = []
        if configuration != "undisturbed":
            env["MXKV_FAULT"] = f"kill:rank={args.group_size}:step={args.kill_step}"
        if configuration == "rejoined":
            options = ["--restarts", "1"]
        command = [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            str(args.ranks),
            "--group-size",
            str(args.group_size),
            "--servers",
            "1",
            "--group-jobs",
            *options,
            "--timeout",
            "600",
            "--",
            "python",
            str(WORKER),
            out,
            str(args.epochs),
            str(args.lr),
        ]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, check=False, text=True, env=env)
        wall = time.monotonic() - started
        expected = 1 if configuration == "lost" else 0
        if done.returncode != expected:
            raise SystemExit(
                f"{configuration}: exit status {done.returncode}\n{done.stdout}{done.stderr}"
            )
        found = [dict(np.load(path)) for path in sorted(Path(out).glob("rank*.npz"))]
        return {
            "wall_s": wall,
            "group_steps": sum(int(f["steps"]) for f in found) / args.group_size,
            "trained": sum(int(f["trained"]) for f in found) / args.group_size,
            "accuracy": float(found[0]["accuracy"]),
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=6)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--kill-step", type=int, default=20)
    parser.add_argument("--ps-timeout", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    runs: Dict[str, List[Dict[str, float]]] = {c: [] for c in CONFIGURATIONS}
    for repeat in range(args.repeats):
        for configuration in CONFIGURATIONS:
            runs[configuration].append(run(configuration, args))
            print(
                f"repeat {repeat + 1}/{args.repeats} {configuration:11s} {runs[configuration][-1]}",
                flush=True,
            )
    medians = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    base = medians["undisturbed"]["wall_s"]
    print(
        f"\n{args.ranks} ranks in groups of {args.group_size}, easgd, {args.epochs} epochs, "
        f"OMP_NUM_THREADS=1, medians of {args.repeats}"
    )
    print(
        f"{'run':12s} {'wall s':>8s} {'lost s':>8s} {'group-steps':>12s} {'trained':>8s} "
        f"{'accuracy':>9s}"
    )
    for configuration, median in medians.items():
        print(
            f"{configuration:12s} {median['wall_s']:8.1f} {median['wall_s'] - base:8.1f} "
            f"{median['group_steps']:12.0f} {median['trained']:8.0f} {median['accuracy']:9.4f}"
        )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "group_failure.json"), "w") as f:
        json.dump({"settings": vars(args), "runs": runs, "medians": medians}, f, indent=1)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.5))
    axis.bar(list(medians), [m["wall_s"] for m in medians.values()], color=["C0", "C3", "C2"])
    for index, configuration in enumerate(medians):
        axis.plot(
            [index] * len(runs[configuration]),
            [r["wall_s"] for r in runs[configuration]],
            "k.",
            alpha=0.6,
        )
    axis.set_ylabel("wall time (s)")
    axis.set_title(f"easgd, {args.ranks // args.group_size} group jobs: one group lost")
    figure.tight_layout()
    figure.savefig(os.path.join(args.out, "group_failure.png"), dpi=120)


if __name__ == "__main__":
    main()

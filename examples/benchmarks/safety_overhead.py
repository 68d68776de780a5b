"""What the safety nets cost a training step: the stall monitor (one thread per rank that
polls a private communicator every 0.2 s) and the call signature (one 16-byte
MPI_Allreduce before every fused collective, which catches mismatched keys/shapes/dtypes).

    python examples/benchmarks/safety_overhead.py [--ranks 2] [--rounds 3]

For each workload Hybrid.pushpull runs in jobs with the monitor on and off (the jobs
alternate, --rounds of each); in the same jobs a bare 16-byte MPI_Allreduce measures
what the signature adds to each call. Medians over repetitions and rounds; prints a
table and writes safety_overhead.json to --out.
"""

import argparse
import functools
import json
import os
import subprocess
import sys
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from job_output import json_lines  # noqa: E402
from timing import seconds, time_calls  # noqa: E402

WORKLOADS = {  # name: (number of keys, floats per key, repetitions)
    "10 keys x 1k floats": (10, 1000, 400),
    "1000 keys x 100 floats": (1000, 100, 100),
    "20 keys x 1M floats": (20, 1 << 20, 15),
}


def worker(monitor: str) -> None:
    """One job: every workload's pushpull time, and a bare 16-byte allreduce's."""
    import mxnet as mx
    from mpi4py import MPI

    import mxkv_hybrid

    if monitor == "off":
        mxkv_hybrid.comm.topology.stall.StallMonitor = lambda *args, **kwargs: None
    store = mx.kv.create("hybrid")
    comm = mxkv_hybrid.world().comm.Dup()
    for name, (keys, floats, reps) in WORKLOADS.items():
        values = [mx.nd.ones((floats,)) for _ in range(keys)]
        names = [f"{name}/{k}" for k in range(keys)]
        for _ in range(3):
            store.pushpull(names, values)
        mx.nd.waitall()
        times = time_calls(reps, comm.Barrier, functools.partial(store.pushpull, names, values))
        mine, extremes = np.array([7, -7], np.int64), np.empty(2, np.int64)
        signature_check = functools.partial(comm.Allreduce, mine, extremes, op=MPI.MAX)
        signature = [seconds(signature_check) for _ in range(200)]
        if store.rank == 0:
            print(
                json.dumps(
                    {
                        "workload": name,
                        "monitor": monitor,
                        "pushpull_us": float(np.median(times)) * 1e6,
                        "signature_us": float(np.median(signature)) * 1e6,
                    }
                ),
                flush=True,
            )


def run_job(ranks: int, monitor: str) -> List[dict]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            str(ranks),
            "--timeout",
            "600",
            "--",
            "python",
            os.path.abspath(__file__),
            "--worker",
            monitor,
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=660,
    )
    if done.returncode != 0:
        raise SystemExit(f"the {monitor} job failed:\n{done.stdout}\n{done.stderr}")
    return json_lines(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--worker", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    rows: List[dict] = []
    for round_number in range(args.rounds):
        for monitor in ("on", "off"):
            print(f"round {round_number + 1}/{args.rounds}: monitor {monitor}", flush=True)
            rows += run_job(args.ranks, monitor)
    summary: Dict[str, dict] = {}

    def median(name: str, monitor: str, field: str) -> float:
        return float(
            np.median([r[field] for r in rows if r["workload"] == name and r["monitor"] == monitor])
        )

    for name in WORKLOADS:
        on, off = median(name, "on", "pushpull_us"), median(name, "off", "pushpull_us")
        signature = median(name, "off", "signature_us")
        summary[name] = {
            "pushpull_monitor_on_us": on,
            "pushpull_monitor_off_us": off,
            "monitor_ratio": on / off,
            "signature_us": signature,
            "signature_share": signature / off,
        }
    print(f"\n{args.ranks} ranks, medians over {args.rounds} rounds of each setting")
    print(
        f"{'workload':<24}{'monitor on':>12}{'off':>12}{'on/off':>8}{'signature':>11}{'share':>8}"
    )
    for name, s in summary.items():
        print(
            f"{name:<24}{s['pushpull_monitor_on_us']:>10.0f}us{s['pushpull_monitor_off_us']:>10.0f}us"
            f"{s['monitor_ratio']:>8.3f}{s['signature_us']:>9.1f}us{s['signature_share']:>8.1%}"
        )
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "safety_overhead.json")
    with open(path, "w") as f:
        json.dump(
            {"ranks": args.ranks, "rounds": args.rounds, "rows": rows, "summary": summary},
            f,
            indent=2,
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

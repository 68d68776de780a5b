"""Throughput under faults: group jobs on 3 emulated hosts (2 ranks each, 1000 Mbit/s
links, the relays on, one parameter server on h1, --restarts) train the digits CNN for a
fixed time, once quiet and once under a fixed schedule of faults, side by side, for each
mode asked (easgd and async by default).

    python examples/benchmarks/faults_throughput.py [--modes easgd async] [--minutes 2]
        [--repeats 1] [--lost-seconds S] [--out examples/benchmarks/results]
    python examples/benchmarks/faults_throughput.py --false-alarms N [--minutes 2] ...

The schedule, every minute of the measured window (times from the minute's start):
  5 s   kill -9 of one rank on h2 (its group is restarted and rejoins);
  25 s  every process of h3 stopped for 3 s (SIGSTOP, then SIGCONT: not a loss);
  35 s  h2's link cut, healed 20 s later.
h1's group is never hit: it is the healthy group, which must never wait for the others.

Every group's first rank prints how many steps it trained every few steps; this script
stamps each line as it arrives. It reports, per mode, the steps per second of every group
and of the whole job over the window, as a fraction of the quiet run's, and the time from
each fault until its group trained again (the end of the longest pause in that group's
progress within a minute of the fault). The quiet and faulty runs alternate; with
--repeats above 1 the table shows medians. On a 2-core machine the groups share the CPU:
while a group is down the others get more of it, so a healthy group's fraction may read
above 1. Needs root (network namespaces), as the emulated-host tests do. Writes
faults_throughput.json and faults_throughput.png to --out.

With --false-alarms N it runs N quiet jobs per mode instead (no fault at all) and counts
every line in which the launcher or a keeper names something lost, restarted or cut off:
each is a false alarm of the bound (MXKV_LOST_SECONDS, the package's default unless
--lost-seconds). Run it beside the test suite to measure the bound under full load; it
records the machine's load average after each run. Writes false_alarms.json to --out.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("h1", "h2", "h3")
RANKS_PER_HOST = 2
PRINT_EVERY = 5  # steps between a group's progress lines
KEYS = (*(str(group) for group in range(len(HOSTS))), "job")  # the figures' columns
WARMUP_SECONDS = 5.0  # after every group's first line, before the window opens
PAUSE_SECONDS = 3.0
HEAL_AFTER = 20.0
PROGRESS = re.compile(r"^\[\d+\] progress group=(\d+) trained=(\d+)$")
# what a false alarm says: the launcher's loss or restart, a keeper or relay that gives up
ALARM = re.compile(r"was lost|restarted|restarting|ending this rank|cut off from|starting it again")


def worker(stop_file: str) -> None:
    """One rank: the digits CNN on its shard until `stop_file` exists (its group's ranks
    agree on the step to stop at)."""
    import mxnet as mx
    import numpy as np
    from mpi4py import MPI
    from mxnet import autograd, gluon

    import mxkv_hybrid  # noqa: F401  (the store 'hybrid')

    sys.path.insert(0, str(ROOT / "examples"))
    from train_digits import build_network, load_data

    kv = mx.kv.create("hybrid")
    group_comm = MPI.COMM_WORLD  # a group job: its own MPI world
    train_x, train_y, _, _ = load_data(42)
    shard_x, shard_y = train_x[kv.rank :: kv.num_workers], train_y[kv.rank :: kv.num_workers]
    net = build_network()
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net(mx.nd.array(shard_x[:1]))
    trainer = gluon.Trainer(
        net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore=kv
    )
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    batches = np.random.RandomState(kv.rank).randint(0, len(shard_y), size=(1000, 32))
    trained = 0
    while not group_comm.allreduce(os.path.exists(stop_file), op=MPI.LOR):
        batch = batches[trained % len(batches)]
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(shard_x[batch])), mx.nd.array(shard_y[batch]))
        loss.backward()
        trainer.step(len(batch))
        trained += 1
        if trained % PRINT_EVERY == 0 and group_comm.Get_rank() == 0:
            print(f"progress group={kv.rank // RANKS_PER_HOST} trained={PRINT_EVERY}", flush=True)
    kv.close()


def schedule(minutes: int) -> List[Tuple[float, str, str]]:
    """(seconds into the window, fault, host) for every fault of the run."""
    each_minute = [(5.0, "kill-rank", "h2"), (25.0, "pause-3s", "h3"), (35.0, "cut-heal-20s", "h2")]
    return [(60.0 * m + at, fault, host) for m in range(minutes) for at, fault, host in each_minute]


def strike(cluster, fault: str, host: str) -> None:
    from mxkv_hybrid.testing.faults import cut_link, kill_a_rank, pause_host

    actions: Dict[str, Callable[[], None]] = {
        "kill-rank": lambda: kill_a_rank(cluster, host),
        "pause-3s": lambda: pause_host(cluster, host, PAUSE_SECONDS),
        "cut-heal-20s": lambda: cut_link(cluster, host, HEAL_AFTER),
    }
    actions[fault]()


def run(mode: str, faulty: bool, args: argparse.Namespace) -> dict:
    """One job; its groups' progress lines (seconds into the window), the faults struck and
    what the launcher said."""
    from mxkv_hybrid.testing.cluster import Cluster

    window = 60.0 * args.minutes
    faults = schedule(args.minutes) if faulty else []
    with tempfile.TemporaryDirectory() as scratch, Cluster(len(HOSTS), rate_mbit=1000) as cluster:
        stop_file = os.path.join(scratch, "stop")
        env = dict(os.environ, MXKV_MODE=mode, OMP_NUM_THREADS=str(args.threads))
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        if args.lost_seconds:
            env["MXKV_LOST_SECONDS"] = str(args.lost_seconds)
        hosts = ",".join(f"{h}:{RANKS_PER_HOST}" for h in HOSTS)
        command = [sys.executable, "-m", "mxkv_hybrid.launch", "--timeout", str(window + 240)]
        command += ["-n", str(len(HOSTS) * RANKS_PER_HOST), "-H", hosts, "--servers", "1"]
        command += ["--restarts", str(2 * args.minutes + 1), "--", "python", __file__]
        command += ["--worker", stop_file]
        launcher = cluster.run(
            "h1", command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        lines: List[Tuple[float, str]] = []

        def read() -> None:
            assert launcher.stdout is not None
            for line in launcher.stdout:
                lines.append((time.monotonic(), line.rstrip("\n")))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        started = time.monotonic()
        while {m.group(1) for _, text in list(lines) if (m := PROGRESS.match(text))} != {
            str(g) for g in range(len(HOSTS))
        }:
            if launcher.poll() is not None or time.monotonic() - started > 240:
                launcher.kill()
                raise RuntimeError("the job did not start:\n" + "\n".join(t for _, t in lines))
            time.sleep(0.1)
        opened = time.monotonic() + WARMUP_SECONDS
        struck = []
        for at, fault, host in faults:
            time.sleep(max(0.0, opened + at - time.monotonic()))
            at_s = time.monotonic() - opened
            try:
                strike(cluster, fault, host)
            except AssertionError as nothing:  # (its group is down: between loss and restart)
                print(f"  {mode} {at_s:6.1f} s: {fault} on {host} skipped: {nothing}", flush=True)
                continue
            struck.append({"at_s": at_s, "fault": fault, "host": host})
            print(f"  {mode} {at_s:6.1f} s: {fault} on {host}", flush=True)
        time.sleep(max(0.0, opened + window - time.monotonic()))
        Path(stop_file).touch()
        status = launcher.wait(timeout=300)
        reader.join(10)
    progress: Dict[str, List[float]] = {}
    for arrived, text in lines:
        found = PROGRESS.match(text)
        if found:
            progress.setdefault(found.group(1), []).append(arrived - opened)
    said = [text for _, text in lines if text.startswith("mxkv-launch:")]
    for text in said if faulty else []:
        print(f"    {text}", flush=True)
    alarms = [text for _, text in lines if ALARM.search(text)]
    return {
        "exit": status,
        "progress": progress,
        "faults": struck,
        "launcher_said": said,
        "alarms": alarms,
        "load_average_1min": os.getloadavg()[0],
    }


def false_alarms(args: argparse.Namespace) -> None:
    """Quiet jobs only: every alarm they raise is false."""
    from mxkv_hybrid.config import read_knob

    bound = args.lost_seconds or read_knob("MXKV_LOST_SECONDS")
    runs = []
    for mode in args.modes:
        for repeat in range(args.false_alarms):
            print(f"{mode}, quiet run {repeat + 1} of {args.false_alarms}", flush=True)
            result = run(mode, False, args)
            runs.append(
                {
                    "mode": mode,
                    **{k: result[k] for k in ("exit", "alarms")},
                    "load_average_1min": result["load_average_1min"],
                }
            )
            print(
                f"  exit {result['exit']}, load {result['load_average_1min']:.1f}, "
                f"alarms: {result['alarms'] or 'none'}",
                flush=True,
            )
    alarms = sum(len(r["alarms"]) for r in runs)
    host_minutes = len(runs) * len(HOSTS) * args.minutes
    print(
        f"{alarms} false alarm(s) in {len(runs)} quiet runs ({host_minutes} host-minutes "
        f"watched) at MXKV_LOST_SECONDS={bound:g}; load average "
        f"{min(r['load_average_1min'] for r in runs):.1f}-"
        f"{max(r['load_average_1min'] for r in runs):.1f}"
    )
    out = Path(args.out) / "false_alarms.json"
    document = {
        "lost_seconds": bound,
        "minutes_per_run": args.minutes,
        "runs": runs,
        "false_alarms": alarms,
        "host_minutes": host_minutes,
    }
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out}")


def rates(result: dict, window: float) -> Dict[str, float]:
    """Steps per second over the window: each group's, and the whole job's ('job')."""
    per_group = {
        group: PRINT_EVERY * sum(0 <= t < window for t in times) / window
        for group, times in result["progress"].items()
    }
    return dict(per_group, job=sum(per_group.values()))


def summarise(runs: Dict[str, List[dict]], window: float) -> dict:
    """One mode's figures: the quiet runs' median steps/s, the median fraction of them the
    faulty run of each pair kept, each faulty run's recoveries, and every run's exit."""
    quiet = [rates(run, window) for run in runs["quiet"]]
    faulty = [rates(run, window) for run in runs["faults"]]
    return {
        "quiet_steps_per_s": {k: statistics.median(r[k] for r in quiet) for k in KEYS},
        "fraction_kept": {
            k: statistics.median(f.get(k, 0.0) / q[k] for q, f in zip(quiet, faulty)) for k in KEYS
        },
        "recoveries": [recovery_seconds(run) for run in runs["faults"]],
        "exits": {
            configuration: [r["exit"] for r in runs[configuration]] for configuration in runs
        },
    }


def recovery_seconds(result: dict) -> List[dict]:
    """For each fault: seconds until its group trained again (the end of the longest
    pause between its progress lines within a minute of the fault)."""
    recovered = []
    for fault in result["faults"]:
        group = str(HOSTS.index(fault["host"]))
        times = [fault["at_s"]] + [
            t for t in result["progress"].get(group, []) if fault["at_s"] < t <= fault["at_s"] + 60
        ]
        gaps = [(later - earlier, later) for earlier, later in zip(times, times[1:])]
        seconds = max(gaps)[1] - fault["at_s"] if gaps else None
        recovered.append(dict(fault, recovered_after_s=seconds))
    return recovered


def plot(results: Dict[str, Dict[str, List[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(results)
    figure, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4), squeeze=False)
    for axis, mode in zip(axes[0], modes):
        for configuration, style in (("quiet", ":"), ("faults", "-")):
            progress = results[mode][configuration][0]["progress"]
            for group in sorted(progress):
                times = sorted(progress[group])
                steps = [PRINT_EVERY * (i + 1) for i in range(len(times))]
                axis.plot(
                    times,
                    steps,
                    style,
                    color=f"C{group}",  # a group's colour; dotted: quiet, solid: under faults
                    label=f"group {group} ({HOSTS[int(group)]}), {configuration}",
                )
        for fault in results[mode]["faults"][0]["faults"]:
            axis.axvline(fault["at_s"], color="grey", linewidth=0.5)
            axis.annotate(
                f"{fault['fault']} ({fault['host']})",
                (fault["at_s"], 0),
                rotation=90,
                fontsize=6,
                color="grey",
                va="bottom",
                ha="right",
            )
        axis.set_title(f"{mode}: steps trained by each group (grey: a fault)")
        axis.set_xlabel("seconds into the window")
        axis.set_ylabel("steps")
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", metavar="STOP_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--modes", nargs="+", default=["easgd", "async"])
    parser.add_argument("--minutes", type=int, default=2, help="the window (default 2)")
    parser.add_argument("--repeats", type=int, default=1, help="quiet/faulty pairs per mode")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS (default 1)")
    parser.add_argument(
        "--lost-seconds", type=float, help="MXKV_LOST_SECONDS (default: the package's)"
    )
    parser.add_argument(
        "--false-alarms", type=int, metavar="N", help="N quiet runs per mode, alarms counted"
    )
    parser.add_argument("--out", default=str(ROOT / "examples" / "benchmarks" / "results"))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.false_alarms:
        false_alarms(args)
        return
    window = 60.0 * args.minutes
    results: Dict[str, Dict[str, List[dict]]] = {}
    for mode in args.modes:
        results[mode] = {"quiet": [], "faults": []}
        for repeat in range(args.repeats):
            for configuration in ("quiet", "faults"):
                print(f"{mode}, {configuration} (pair {repeat + 1} of {args.repeats})", flush=True)
                results[mode][configuration].append(run(mode, configuration == "faults", args))
    summary = {mode: summarise(runs, window) for mode, runs in results.items()}
    header = f"{'mode':<6} {'steps/s':<8} " + " ".join(
        f"{name:>14}" for name in ("group 0 (h1)", "group 1 (h2)", "group 2 (h3)", "job")
    )
    rows = []
    for mode, figures in summary.items():
        quiet, kept = figures["quiet_steps_per_s"], figures["fraction_kept"]
        rows.append(f"{mode:<6} {'quiet':<8} " + " ".join(f"{quiet[k]:>14.1f}" for k in KEYS))
        rows.append(f"{'':<6} {'kept':<8} " + " ".join(f"{kept[k]:>14.3f}" for k in KEYS))
    print(header)
    print("\n".join(rows))
    print("\nfault -> its group trained again (seconds), first faulty run of each mode:")
    for mode in results:
        for fault in summary[mode]["recoveries"][0]:
            after = fault["recovered_after_s"]
            print(
                f"  {mode:<6} {fault['at_s']:6.1f} s {fault['fault']:<13} on {fault['host']}: "
                + ("never" if after is None else f"{after:.1f}")
            )
    out = Path(args.out)
    settings = {k: v for k, v in vars(args).items() if k not in ("worker", "out")}
    document = {
        "settings": settings,
        "schedule_per_minute": schedule(1),
        "summary": summary,
        "runs": results,
    }
    (out / "faults_throughput.json").write_text(json.dumps(document, indent=1) + "\n")
    plot(results, out / "faults_throughput.png")
    print(f"wrote {out / 'faults_throughput.json'} and faults_throughput.png")


if __name__ == "__main__":
    main()

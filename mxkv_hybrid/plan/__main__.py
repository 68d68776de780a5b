"""Which mode, algorithm and averaging period for a model on a cluster: an alpha-beta cost
model of every configuration (docs/planner.md).

    python -m mxkv_hybrid.plan --model resnet50_v1 --hosts 8 --ranks-per-host 8 \\
        --between-gbps 25 --compute-ms 110 [--plot plan.png]

Prints one row per configuration (predicted step, communication not hidden by compute,
bytes per step inside and across hosts, per-server load, scaling efficiency against one
rank) and a recommendation with its reason."""

import argparse
import dataclasses
import json
import logging
import sys
import time
from typing import List, Optional

from ..comm import algorithm_table
from ..errors import ConfigError
from ..logs import TO_STDERR
from .cluster import Cluster, Link
from .mode_costs import Planner, Workload, scaling
from .model_sizes import array_bytes
from .report import plot, recommendation, scaling_table, table
from .summary_reader import read_summaries

log = logging.getLogger("mxkv_hybrid.plan")  # run as __main__ (python -m mxkv_hybrid.plan)


def build_parser() -> argparse.ArgumentParser:
    """The planner's flags (the docs' flag page is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="python -m mxkv_hybrid.plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = parser.add_argument_group("the model")
    model.add_argument(
        "--model",
        default="resnet50_v1",
        help="a Gluon model-zoo name, or a saved parameter list (.params, .npz, "
        ".json list of shapes)",
    )
    model.add_argument(
        "--compute-ms", type=float, help="forward + backward of one batch on one rank alone"
    )
    model.add_argument(
        "--update-ms",
        type=float,
        default=0.0,
        help="one optimizer update of the whole model on one rank",
    )
    model.add_argument(
        "--straggler-ms",
        type=float,
        help="how much later than the compute above the slowest rank reaches a "
        "step's collective (its group's or everyone's), per step (default "
        "0, or --from-summary's)",
    )
    model.add_argument(
        "--drift-ms",
        type=float,
        default=0.0,
        help="of --straggler-ms, what ranks lose a step by progressing at "
        "unequal rates (a slower rank, shared cores): it adds up between "
        "meetings, so lasgd pays it every step, not once every tau",
    )
    model.add_argument(
        "--from-summary",
        metavar="LOG",
        help="a job's output with MXKV_SUMMARY_EVERY lines: --compute-ms (the "
        "ranks' mean compute a step) and --straggler-ms (the slowest "
        "rank's lateness), unless given",
    )
    model.add_argument(
        "--measure",
        action="store_true",
        help="measure --compute-ms and --update-ms on this machine (model-zoo "
        "models; --batch images of --image-size)",
    )
    model.add_argument("--batch", type=int, default=32, help="images per rank (--measure)")
    model.add_argument("--image-size", type=int, default=224, help="(--measure)")
    cluster = parser.add_argument_group("the cluster")
    cluster.add_argument("--hosts", type=int, default=2)
    cluster.add_argument("--ranks-per-host", type=int, default=8)
    cluster.add_argument(
        "--cores-per-host",
        type=float,
        default=0,
        help="when fewer than the ranks, compute stretches (0: one per rank)",
    )
    cluster.add_argument(
        "--inside-gbps",
        type=float,
        default=100.0,
        help="bandwidth between two ranks of a host, Gbit/s",
    )
    cluster.add_argument("--inside-latency-us", type=float, default=2.0)
    cluster.add_argument(
        "--between-gbps",
        "--inter-host-gbps",
        type=float,
        default=25.0,
        help="a host's network link, Gbit/s, shared by its ranks",
    )
    cluster.add_argument("--between-latency-us", type=float, default=20.0)
    cluster.add_argument(
        "--emulated-mbps",
        type=float,
        help="instead of --between-*: the emulated link of MXKV_THROTTLE_MBPS, "
        "Mbit/s (a group's, shared by its ranks as a host's card is)",
    )
    cluster.add_argument(
        "--emulated-latency-ms",
        type=float,
        default=0.0,
        help="with --emulated-mbps: MXKV_THROTTLE_LATENCY_MS",
    )
    cluster.add_argument(
        "--servers", type=int, default=0, help="parameter servers (0: one per host)"
    )
    cluster.add_argument(
        "--server-gbps",
        type=float,
        help="what one parameter server moves, Gbit/s: its link, or ps-lite's "
        "own throughput when lower (default: as --between-gbps)",
    )
    cluster.add_argument(
        "--server-latency-us",
        type=float,
        default=50.0,
        help="with --server-gbps: a push's or pull's latency",
    )
    cluster.add_argument(
        "--servers-beside-ranks",
        action="store_true",
        help="the servers run on one of the hosts, behind its link, as "
        "mxkv-launch starts them (on its own host); --server-gbps is then "
        "ps-lite's own throughput (default: each server a link of its own)",
    )
    plan = parser.add_argument_group("what to compare")
    plan.add_argument(
        "--taus", type=int, nargs="+", default=[4, 16], help="averaging periods of easgd and lasgd"
    )
    plan.add_argument(
        "--algorithm",
        choices=["best", "table"],
        default="best",
        help="per bucket: the cheapest algorithm (what tune would find), or the "
        "algorithm table auto reads now",
    )
    plan.add_argument("--bucket-mb", type=float, default=1.0, help="MXKV_BUCKET_MB")
    plan.add_argument("--overlap", action="store_true", help="MXKV_OVERLAP=1 (mode allreduce)")
    plan.add_argument("--plot", help="PNG: predicted step and efficiency against host count")
    plan.add_argument(
        "--plot-hosts", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256]
    )
    plan.add_argument("--json", help="write the predictions to this file")
    return parser


def parse_arguments(argv: List[str]) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_summary:
        try:
            with open(args.from_summary) as f:
                figures = read_summaries(f.read(), args.from_summary)
        except (OSError, ConfigError) as err:
            parser.error(str(err))
        args.compute_ms = args.compute_ms if args.compute_ms is not None else figures.compute_ms
        args.straggler_ms = (
            args.straggler_ms if args.straggler_ms is not None else figures.straggler_ms
        )
    args.straggler_ms = args.straggler_ms or 0.0
    if not 0 <= args.drift_ms <= args.straggler_ms:
        parser.error(
            f"--drift-ms {args.drift_ms:g} is a part of --straggler-ms "
            f"({args.straggler_ms:g}): give a value from 0 to it"
        )
    if args.compute_ms is None and not args.measure:
        parser.error(
            "give the compute time of one batch (--compute-ms), read it from a job's "
            "step summaries (--from-summary), or --measure it here"
        )
    if args.hosts < 1 or args.ranks_per_host < 1:
        parser.error("--hosts and --ranks-per-host must be at least 1")
    return args


def measured_workload(args: argparse.Namespace, sizes: List[int]) -> Workload:
    """Times forward + backward of one batch and one SGD-momentum update, on this machine."""
    import mxnet as mx
    from mxnet import autograd

    net = mx.gluon.model_zoo.vision.get_model(args.model)
    net.initialize()
    data = mx.nd.random.uniform(shape=(args.batch, 3, args.image_size, args.image_size))
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    trainer = mx.gluon.Trainer(
        params, "sgd", {"learning_rate": 0.01, "momentum": 0.9}, kvstore=None
    )
    compute, update = [], []
    for rep in range(4):  # the first is a warm-up
        started = time.perf_counter()
        with autograd.record():
            loss = net(data).sum()
        loss.backward()
        mx.nd.waitall()
        middle = time.perf_counter()
        trainer.step(args.batch)
        mx.nd.waitall()
        if rep:
            compute.append(middle - started)
            update.append(time.perf_counter() - middle)
        log.info(f"measuring {args.model}: {rep + 1}/4", extra=TO_STDERR)
    return Workload(
        sizes,
        sorted(compute)[len(compute) // 2],
        sorted(update)[len(update) // 2],
        bucket_bytes=int(args.bucket_mb * 2**20),
    )


def cluster_of(args: argparse.Namespace) -> Cluster:
    inside = Link(args.inside_latency_us * 1e-6, args.inside_gbps * 1e9 / 8)
    if args.emulated_mbps:
        between = Link(args.emulated_latency_ms * 1e-3, args.emulated_mbps * 1e6 / 8)
    else:
        between = Link(args.between_latency_us * 1e-6, args.between_gbps * 1e9 / 8)
    servers = (
        Link(args.server_latency_us * 1e-6, args.server_gbps * 1e9 / 8)
        if args.server_gbps
        else None
    )
    return Cluster(
        args.hosts,
        args.ranks_per_host,
        inside,
        between,
        servers=args.servers,
        servers_beside=args.servers_beside_ranks,
        server_link=servers,
        cores_per_host=args.cores_per_host,
    )


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    try:
        sizes = array_bytes(args.model)
    except ConfigError as err:
        sys.exit(f"mxkv_hybrid.plan: {err}")
    workload = (
        measured_workload(args, sizes)
        if args.measure
        else Workload(
            sizes,
            args.compute_ms / 1e3,
            args.update_ms / 1e3,
            bucket_bytes=int(args.bucket_mb * 2**20),
        )
    )
    workload = dataclasses.replace(
        workload,
        world_wait_seconds=args.straggler_ms / 1e3,
        group_wait_seconds=args.straggler_ms / 1e3,
        drift_seconds=args.drift_ms / 1e3,
    )
    cluster = cluster_of(args)
    options = {
        "table": algorithm_table.load(algorithm_table.default_path())
        if args.algorithm == "table"
        else None,
        "overlap": args.overlap,
    }
    rows = Planner(workload, cluster, **options).predictions(args.taus)
    print(
        f"{args.model}: {len(sizes)} arrays, {workload.model_bytes / 2**20:.1f} MiB; compute "
        f"{1e3 * workload.compute_seconds:.1f} ms + update {1e3 * workload.update_seconds:.1f} "
        f"ms a step on one rank; {cluster.hosts} host(s) x {cluster.ranks_per_host} ranks, "
        f"{cluster.server_count} server(s); predicted (a model, not a measurement):"
    )
    print(table(rows))
    print(recommendation(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "arguments": vars(args),
                    "model_bytes": workload.model_bytes,
                    "compute_seconds": workload.compute_seconds,
                    "update_seconds": workload.update_seconds,
                    "predictions": [dataclasses.asdict(r) for r in rows],
                },
                f,
                indent=1,
            )
    if args.plot:
        at_scale = scaling(workload, cluster, args.plot_hosts, **options)
        print(scaling_table(at_scale, cluster.ranks_per_host))
        plot(
            at_scale,
            cluster.ranks_per_host,
            f"{args.model}, {cluster.ranks_per_host} ranks a host",
            args.plot,
        )
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()

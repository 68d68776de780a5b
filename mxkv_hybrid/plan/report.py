"""The planner's table, its recommendation and its plot."""

from typing import Dict, List, Sequence

from .mode_costs import Prediction

MIB = 2**20


def table(rows: Sequence[Prediction]) -> str:
    lines = [
        (
            f"{'configuration':>24} {'step ms':>9} {'comm ms':>9} {'MiB inside':>11} "
            f"{'MiB across':>11} {'MiB/server':>11} {'efficiency':>11}"
        )
    ]
    for r in sorted(rows, key=lambda r: r.step_seconds):
        lines.append(
            f"{r.configuration:>24} {1e3 * r.step_seconds:9.1f} "
            f"{1e3 * r.communication_seconds:9.1f} {r.bytes_inside / MIB:11.1f} "
            f"{r.bytes_across / MIB:11.1f} {r.server_bytes / MIB:11.1f} "
            f"{100 * r.efficiency:10.0f}%"
        )
    return "\n".join(lines)


def recommendation(rows: Sequence[Prediction]) -> str:
    """The fastest configuration that takes the step of one process on the union of the
    batches, and, when an averaging mode is much faster, that one with its caveat."""
    synchronous = min((r for r in rows if r.synchronous), key=lambda r: r.step_seconds)
    others = [r for r in rows if r.synchronous and r is not synchronous]
    text = (
        f"recommended: {synchronous.configuration} ({1e3 * synchronous.step_seconds:.1f} ms "
        f"a step, {100 * synchronous.efficiency:.0f}% scaling efficiency)"
    )
    if others:
        runner_up = min(others, key=lambda r: r.step_seconds)
        text += (
            f": {runner_up.step_seconds / synchronous.step_seconds:.2f}x faster than "
            f"{runner_up.configuration}"
        )
        if synchronous.bytes_across < runner_up.bytes_across:
            text += (
                f", {runner_up.bytes_across / max(synchronous.bytes_across, 1):.1f}x fewer "
                "bytes across hosts"
            )
    fastest = min(rows, key=lambda r: r.step_seconds)
    if not fastest.synchronous and fastest.step_seconds < 0.77 * synchronous.step_seconds:
        text += (
            f".\nfaster still if averaging converges for this model (see "
            f"docs/performance/convergence.md): {fastest.configuration}, "
            f"{synchronous.step_seconds / fastest.step_seconds:.2f}x"
        )
    return text + "."


def scaling_table(predictions: Dict[int, List[Prediction]], ranks_per_host: int) -> str:
    """Scaling efficiency (%) per configuration (rows) and host count (columns)."""
    hosts = sorted(predictions)
    names = [r.configuration for r in predictions[hosts[-1]]]
    lines = [f"{'efficiency %, ranks:':>24} " + " ".join(f"{h * ranks_per_host:>6}" for h in hosts)]
    for name in names:
        cells = []
        for h in hosts:
            found = [r for r in predictions[h] if r.configuration == name]
            cells.append(f"{100 * found[0].efficiency:6.0f}" if found else f"{'-':>6}")
        lines.append(f"{name:>24} " + " ".join(cells))
    return "\n".join(lines)


def plot(
    predictions: Dict[int, List[Prediction]], ranks_per_host: int, title: str, path: str
) -> None:
    """Predicted step time and scaling efficiency against the host count, per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hosts = sorted(predictions)
    names = [r.configuration for r in predictions[hosts[-1]]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in names:
        points = [(h, r) for h in hosts for r in predictions[h] if r.configuration == name]
        xs = [h for h, _ in points]
        left.plot(xs, [1e3 * r.step_seconds for _, r in points], marker="o", label=name)
        right.plot(xs, [100 * r.efficiency for _, r in points], marker="o", label=name)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"hosts ({ranks_per_host} ranks each)")
    left.set_ylabel("predicted ms per step")
    right.set_ylabel("predicted scaling efficiency (%)")
    right.legend(fontsize=7)
    fig.suptitle(title + " (a model, not a measurement)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)

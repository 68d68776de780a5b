"""One legend below a figure's panels, for figures whose panels share their lines."""

from typing import Iterable


def legend_below(figure, axes: Iterable, columns: int) -> None:
    """Lays `figure` out, then puts below it one legend with every label of `axes` once
    (the first panel's handle of each). Save it with bbox_inches="tight": the canvas then
    grows to hold the legend, whatever its length."""
    labelled: dict = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            labelled.setdefault(label, handle)
    figure.tight_layout()
    figure.legend(
        labelled.values(),
        labelled.keys(),
        loc="upper center",
        bbox_to_anchor=(0.5, 0),
        ncol=columns,
        frameon=False,
    )

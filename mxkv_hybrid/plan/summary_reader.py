"""Compute times from a job's step summaries (MXKV_SUMMARY_EVERY): the planner's compute
and straggler figures, measured by the product on the user's own job."""

import re
from dataclasses import dataclass
from statistics import median

from ..errors import ConfigError

_COMPUTE = re.compile(r"mxkv_hybrid summary: .*?per step: compute ([\d.]+) ms")
_SLOWEST = re.compile(r"slowest rank \d+ computes ([\d.]+) ms")


@dataclass(frozen=True)
class SummaryFigures:
    compute_ms: float  # the ranks' mean compute a step (time outside the store's calls)
    straggler_ms: float  # how much longer the slowest rank computes than that mean
    lines: int  # summary lines read


def read_summaries(text: str, source: str = "the log") -> SummaryFigures:
    """The median over every summary line with compute times (the first window of a
    summary every step has none) of the mean compute and the slowest rank's lateness."""
    computes, lateness = [], []
    for line in text.splitlines():
        found = _COMPUTE.search(line)
        if not found:
            continue
        computes.append(float(found.group(1)))
        slowest = _SLOWEST.search(line)
        lateness.append(float(slowest.group(1)) - computes[-1] if slowest else 0.0)
    if not computes:
        raise ConfigError(
            f"no 'mxkv_hybrid summary' line with compute times in {source}: run "
            "the job with MXKV_SUMMARY_EVERY=k (k >= 2) and give its output"
        )
    return SummaryFigures(median(computes), median(lateness), len(computes))

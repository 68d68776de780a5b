"""The files of an MXKV_TIMELINE trace: each rank writes its part (`part_path`) when it
exits (comm/timeline.py), and mxkv-launch joins the parts into the one trace (`merge`)
when the job ends."""

import glob
import json
import os
from typing import Any, Dict, List, Optional

PART_SUFFIX = ".rank"


def part_path(path: str, rank: int) -> str:
    """Where rank `rank` writes its part of the trace at `path`."""
    return f"{path}{PART_SUFFIX}{rank}"


def merge(path: str) -> Optional[str]:
    """Joins the ranks' parts of `path` into one Chrome trace (the parts are removed);
    returns a line saying what was written, or None when there were no parts."""
    parts = sorted(glob.glob(f"{glob.escape(path)}{PART_SUFFIX}*"))
    if not parts:
        return None
    events: List[Dict[str, Any]] = []
    for part in parts:
        with open(part) as f:
            events += json.load(f)
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    for part in parts:
        os.remove(part)
    return (
        f"timeline of {len(parts)} rank(s), {len(events)} events, written to {path} "
        "(open it in ui.perfetto.dev or chrome://tracing)"
    )

"""CPU seconds of a process of this machine, from /proc (the benchmarks that count what
their processes cost: relay.py, training_step.py)."""

import os


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (every thread)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

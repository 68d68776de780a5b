"""The shared-memory segments MPICH leaves in /dev/shm when a job's ranks are killed (a
failed rank, --timeout, a lost group): about 2 MB each, measured one per failed 2-rank
job, never removed, until /dev/shm is full and every later MPI job on the host fails to
start. A job that ends normally leaves none. The launcher removes, when it is done, the
segments that appeared while it ran and that no process maps or holds open (another
job's live segments are mapped); segments on other hosts are theirs to clean."""

import os
from pathlib import Path
from typing import List, Set

SHM = Path("/dev/shm")
PREFIX = "mpich_shm_"


def segments() -> Set[str]:
    """The names of MPICH's segments in /dev/shm now."""
    try:
        return {name for name in os.listdir(SHM) if name.startswith(PREFIX)}
    except OSError:
        return set()


def in_use() -> Set[str]:
    """The segments some process maps or holds open (of the processes this user may read)."""
    used: Set[str] = set()
    marker = f"{SHM}/{PREFIX}"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                used.update(line.split(marker, 1)[1].split()[0] for line in maps if marker in line)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(marker):
                    used.add(target[len(marker) :].split()[0])
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return {PREFIX + name for name in used}


def remove_left(before: Set[str]) -> List[str]:
    """Removes the segments not in `before` that nothing uses; returns their names."""
    appeared = segments() - before
    removed = []
    for name in sorted(appeared - in_use() if appeared else set()):
        try:
            (SHM / name).unlink()
            removed.append(name)
        except OSError:  # another user's, or gone
            continue
    return removed

"""The table MXKV_ALGO=auto reads: for each rank count, which allreduce algorithm to use up
to which message size. `python -m mxkv_hybrid.tune` measures one and saves it; the package
ships the table measured on its development machine."""

import json
import os
from typing import Dict, List, Optional, Tuple

from ..atomic_file import write_atomically
from ..config import ALGORITHMS
from ..errors import ConfigError

Rules = List[Tuple[int, str]]  # [(max bytes, or -1 for no limit, algorithm), ...] by size
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allreduce_table.json")
SAVED = os.path.join(os.path.expanduser("~"), ".cache", "mxkv_hybrid", "allreduce_table.json")


def default_path() -> str:
    """Where auto's table comes from when MXKV_ALGO_TABLE is empty."""
    return SAVED if os.path.exists(SAVED) else SHIPPED


def load(path: str) -> Dict[int, Rules]:
    """{rank count: rules}; raises ConfigError naming the file and the problem."""
    try:
        with open(path) as f:
            document = json.load(f)
        tables = {
            int(ranks): [(int(limit), str(name)) for limit, name in rules]
            for ranks, rules in document["tables"].items()
        }
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"cannot read the algorithm table {path}: {err}. Write a new one with "
            "`mxkv-launch -n N -- python -m mxkv_hybrid.tune`, or unset "
            "MXKV_ALGO_TABLE"
        ) from None
    for ranks, rules in tables.items():
        bad = [name for _, name in rules if name not in ALGORITHMS or name == "auto"]
        if bad or not rules or rules[-1][0] != -1:
            raise ConfigError(
                f"the algorithm table {path} is invalid for {ranks} ranks: each "
                "rule names mpi, ring, rhd or rd, and the last has no limit (-1)"
            )
    return tables


def rules_for(tables: Dict[int, Rules], ranks: int) -> Rules:
    """The rules measured for `ranks`, else for the nearest rank count (the smaller on a tie)."""
    if not tables:
        return [(-1, "ring")]
    nearest = min(tables, key=lambda measured: (abs(measured - ranks), measured))
    return tables[nearest]


def save(path: str, ranks: int, rules: Rules, machine: Optional[str] = None) -> None:
    """Adds or replaces the rules for `ranks` in the table at `path` (created if missing)."""
    document: Dict[str, dict] = {"tables": {}}
    if os.path.exists(path):
        with open(path) as f:
            document = json.load(f)
    document["tables"][str(ranks)] = [list(rule) for rule in rules]
    if machine:
        document.setdefault("machines", {})[str(ranks)] = machine
    write_atomically(path, json.dumps(document, indent=1, sort_keys=True).encode())

"""The Trainer-rules table: for each mode, weight storage type, gradient storage type and
update_on_kvstore, what a Gluon Trainer decides with kvstore='hybrid' (where the weights
are updated, or the error it raises; then whether parameters loaded after a step are
refused), against what MXNet 1.9.1's own Trainer decides for the dist store the mode
stands in for. tests/jobs/test_trainer_rules.py runs every cell (the hybrid side in real jobs,
MXNet's side with tests/workers/trainer_rules.py --reference); the reference page
docs/reference/trainer-rules.md is rendered from it."""

import json
import subprocess
import sys
from typing import Dict, List, NamedTuple, Tuple

from support.paths import WORKERS

WORKER = WORKERS / "trainer_rules.py"
MODES = ("allreduce", "sync", "async", "easgd", "lasgd")
STYPES = ("default", "row_sparse")
UPDATE_ON_KVSTORE = ("None", "True", "False")


class Cell(NamedTuple):
    weight: str
    gradient: str
    update_on_kvstore: str

    def argument(self) -> str:
        """tests/workers/trainer_rules.py --cell's value."""
        return ",".join(self)


CELLS: List[Cell] = [Cell(w, g, u) for w in STYPES for g in STYPES for u in UPDATE_ON_KVSTORE]

# The MXNet store each mode stands in for, as tests/workers/trainer_rules.py --reference
# names it, and what it is.
COUNTERPARTS: Dict[str, str] = {
    "dist_sync": "MXNet's dist_sync: the servers keep the weights and run the optimizer",
    "dist_async": "MXNet's dist_async: the same, each worker's update applied as it comes",
    "dist_sync_p3": (
        "MXNet's dist_sync over the P3 van (DMLC_PS_VAN_TYPE=p3), its dist store that does "
        "not run the optimizer: each worker updates its own weights"
    ),
}
COUNTERPART_OF: Dict[str, str] = {
    "allreduce": "dist_sync",  # the store keeps the weights and runs the optimizer
    "sync": "dist_sync",
    "async": "dist_async",
    "easgd": "dist_sync_p3",  # each rank (group) updates its own weights, then averages
    "lasgd": "dist_sync_p3",
}

# (decision, load) where the hybrid store decides otherwise than its counterpart, and why.
_AVERAGING_SPARSE_GRADIENTS = (
    "with row_sparse gradients MXNet's Trainer skips its check of the store's optimizer "
    "capability and would update on a store that cannot update; the hybrid store applies "
    "the rule MXNet applies to dense gradients, so each rank updates its own weights, "
    "which the averaging needs"
)
DIFFERENCES: Dict[Tuple[str, Cell], Tuple[Tuple[str, str], str]] = {
    (mode, Cell("default", "row_sparse", update)): (outcome, _AVERAGING_SPARSE_GRADIENTS)
    for mode in ("easgd", "lasgd")
    for update, outcome in (
        ("None", ("update_on_kvstore=False", "loaded")),
        ("True", ("ValueError", "-")),
        ("False", ("update_on_kvstore=False", "loaded")),
    )
}


def same_outcome(reference: Tuple[str, str], found: Tuple[str, str]) -> bool:
    """Whether (decision, load) `found` is `reference`'s: the same update_on_kvstore, and
    errors of the reference's type (found names every built-in type its error is, as
    'RuntimeError|ValueError')."""
    return all(
        want == got or (want.endswith("Error") and want in got.split("|"))
        for want, got in zip(reference, found)
    )


def expected(mode: str, cell: Cell, reference: Tuple[str, str]) -> Tuple[str, str]:
    """What the hybrid store must decide in `mode` for `cell`, given its counterpart's."""
    difference = DIFFERENCES.get((mode, cell))
    return reference if difference is None else difference[0]


def describe(outcome: Tuple[str, str]) -> str:
    """(decision, load) in words, for the page."""
    decision, load = outcome
    if not decision.startswith("update_on_kvstore="):
        return f"raises `{decision}`"
    where = "the store updates" if decision.endswith("True") else "each worker updates"
    after = "loading refused (`RuntimeError`)" if load == "RuntimeError" else "loading allowed"
    return f"{where}; {after}"


def outcomes_in(output: str) -> Dict[Cell, Tuple[str, str]]:
    """The `cell {...}` lines of tests/workers/trainer_rules.py's output: (decision, load)
    by cell."""
    found = {}
    for line in output.splitlines():
        if "cell {" in line:
            row = json.loads(line.split("cell ", 1)[1])
            cell = Cell(row["weight"], row["gradient"], row["update_on_kvstore"])
            found[cell] = (row["decision"], row["load"])
    return found


def run_reference(store: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    """MXNet's own Trainer on the counterpart `store`, every cell (a process that never
    imports mxkv_hybrid); outcomes_in reads its stdout."""
    return subprocess.run(
        [sys.executable, str(WORKER), "--reference", store],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )

"""MXNet's Trainer rules, cell by cell (tests/tables/trainer_rules.py): in every mode, for
every weight and gradient storage type and update_on_kvstore, the Trainer over the hybrid
store decides what MXNet 1.9.1's Trainer decides for the mode's dist store, or raises an
error of the same type, and refuses parameters loaded after its first step where MXNet
refuses them. MXNet's side runs MXNet's own code in processes that never import
mxkv_hybrid; the hybrid side runs in real jobs (one rank; with a server in the modes that
have them, one job per cell, since a process keeps one model on the servers)."""

import json
from typing import Dict, List, Tuple

import pytest

from mxkv_hybrid.capabilities import capabilities_of

from support.jobs import finish_job, job_environment, start_job
from tables.trainer_rules import (
    CELLS,
    COUNTERPART_OF,
    COUNTERPARTS,
    MODES,
    Cell,
    expected,
    outcomes_in,
    run_reference,
    same_outcome,
)

Outcome = Tuple[str, str]  # (decision, load)
AT_ONCE = 3  # cell jobs running side by side (each mostly starting processes)


@pytest.fixture(scope="module")
def mxnet_decides() -> Dict[str, Dict[Cell, Outcome]]:
    """MXNet's own Trainer on each counterpart store, every cell."""
    decided = {}
    for store in COUNTERPARTS:
        run = run_reference(store, job_environment())
        assert run.returncode == 0, run.stdout + run.stderr
        decided[store] = outcomes_in(run.stdout)
        assert set(decided[store]) == set(CELLS), run.stdout
    return decided


def hybrid_decides(mode: str) -> Dict[Cell, Outcome]:
    """Every cell on kvstore='hybrid' in `mode`: one job for all cells where no server keeps
    the weights, else a job per cell, AT_ONCE at a time."""
    env = {"MXKV_MODE": mode}
    if not capabilities_of(mode).servers:
        batches: List[List[List[str]]] = [[[]]]
        options: List[str] = []
    else:
        cells = [["--cell", c.argument()] for c in CELLS]
        batches = [cells[i : i + AT_ONCE] for i in range(0, len(cells), AT_ONCE)]
        options = ["--servers", "1"]
    found: Dict[Cell, Outcome] = {}
    for batch in batches:
        jobs = [
            start_job(1, "trainer_rules.py", *args, env=env, launcher_options=options, timeout=90)
            for args in batch
        ]
        for job in map(finish_job, jobs):
            assert job.returncode == 0, job.output
            found.update(outcomes_in(job.output))
    assert set(found) == set(CELLS)
    return found


@pytest.mark.parametrize("mode", MODES)
def test_the_trainer_decides_as_mxnet_decides_for_the_modes_dist_store(mode, mxnet_decides):
    reference = mxnet_decides[COUNTERPART_OF[mode]]
    found = hybrid_decides(mode)
    wrong = {
        cell: {"expected": expected(mode, cell, reference[cell]), "found": found[cell]}
        for cell in CELLS
        if not same_outcome(expected(mode, cell, reference[cell]), found[cell])
    }
    assert not wrong, json.dumps({str(tuple(c)): w for c, w in wrong.items()}, indent=1)


def test_the_table_notices_a_changed_decision(mxnet_decides):
    """The comparison fails on a decision or error type that is not the reference's."""
    reference = mxnet_decides["dist_sync"]
    dense = Cell("default", "default", "None")
    assert same_outcome(reference[dense], ("update_on_kvstore=True", "RuntimeError"))
    assert not same_outcome(reference[dense], ("update_on_kvstore=True", "reset"))
    assert not same_outcome(reference[dense], ("update_on_kvstore=False", "loaded"))
    refused = Cell("default", "row_sparse", "False")
    assert same_outcome(reference[refused], ("RuntimeError|ValueError", "-"))
    assert not same_outcome(reference[refused], ("RuntimeError", "-"))

"""The allreduce algorithms (ring, rhd, rd, and MPI's own) on real MPI jobs of 1 to 4, 6 and 7
ranks, against a float64 reference; and `python -m mxkv_hybrid.tune` on 2 ranks saving a table
that `auto` can read."""

import pytest

import mxkv_hybrid  # noqa: F401
from mxkv_hybrid.comm import algorithm_table

from support.warm_ranks import launch_in


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 6, 7])  # 5 = 4 + 1 adds nothing to 3 = 2 + 1
def test_every_algorithm_matches_a_float64_reference(warm_ranks, ranks):
    job = launch_in(warm_ranks, ranks, "algorithms.py", timeout=240)
    assert job.returncode == 0, job.output
    assert job.lines_of(0)[-1] == "CHECKED 448", job.output


def test_tune_measures_and_saves_rules_that_auto_can_read(warm_ranks, tmp_path):
    table = tmp_path / "table.json"
    job = launch_in(
        warm_ranks, 2, "-m", "mxkv_hybrid.tune", "--quick", "--out", str(table), timeout=240
    )
    assert job.returncode == 0, job.output
    progress = [
        line
        for line in job.lines_of(0)
        if line.rstrip().endswith(("-> mpi", "-> ring", "-> rhd", "-> rd"))
    ]
    assert len(progress) == 6, job.output  # 1 KiB, 16 KiB, ... 64 MiB, 128 MiB
    rules = algorithm_table.load(str(table))[2]
    assert rules[-1][0] == -1 and all(name in ("mpi", "ring", "rhd", "rd") for _, name in rules)
    assert [limit for limit, _ in rules[:-1]] == sorted(limit for limit, _ in rules[:-1])

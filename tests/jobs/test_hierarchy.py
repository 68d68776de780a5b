"""MXKV_HIERARCHY: the hierarchical allreduce on real MPI jobs of 4 and 6 ranks in groups of
2 and 3 (every algorithm across groups, four dtypes, compression on and off, bit-identical
on every rank, within float tolerance of a float64 sum and of the flat allreduce, whole calls
of many buckets (the pipelined stages) float32 and as bfloat16, the bytes it sends across
groups); a Gluon training in mode allreduce that uses it."""

import pytest

from support.checks import (
    assert_identical_across_ranks,
    assert_matches_reference,
    bytes_across,
    load_ranks,
)
from support.warm_ranks import launch_in


@pytest.mark.parametrize("ranks, group_size", [(4, 2), (6, 3), (6, 2)])
def test_hierarchical_allreduce_matches_a_float64_sum_and_the_flat_one(
    warm_ranks, ranks, group_size
):
    job = launch_in(warm_ranks, ranks, "hierarchical.py", str(group_size), timeout=240)
    assert job.returncode == 0, job.output
    groups = ranks // group_size
    assert job.lines_of(0)[-1] == f"CHECKED 440 in {groups} groups of {group_size}", job.output


def test_gluon_training_in_groups(warm_ranks, job_dir, references):
    """Mode allreduce over 2 groups of 2 (MXKV_GROUP_SIZE): hierarchical or flat, the
    weights are identical on every rank and match one process on the union of the batches;
    the hierarchical one sends fewer bytes across the groups (the summary line says)."""
    reference = references.weights("train_gluon.py", "--reference", "4")
    across = {}
    for hierarchy in ("on", "off"):
        job = launch_in(
            warm_ranks,
            4,
            "train_gluon.py",
            "--out",
            str(job_dir / hierarchy),
            "--kvstore",
            "string",
            env={"MXKV_GROUP_SIZE": "2", "MXKV_HIERARCHY": hierarchy, "MXKV_SUMMARY_EVERY": "5"},
        )
        assert job.returncode == 0, job.output
        across[hierarchy] = bytes_across(job.output)
        weights = load_ranks(job_dir / hierarchy, 4)
        assert_identical_across_ranks(weights)
        assert_matches_reference(weights[0], reference)
    assert across["on"] < across["off"], across

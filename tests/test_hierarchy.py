"""MXKV_HIERARCHY: the hierarchical allreduce on real MPI jobs of 4 and 6 ranks in groups of
2 and 3 (every algorithm across groups, four dtypes, compression on and off, bit-identical
on every rank, within float tolerance of a float64 sum and of the flat allreduce, the bytes
it sends across groups); a Gluon training in mode allreduce that uses it; and when it is
chosen or refused."""

import pytest

from mxkv_hybrid.comm.hierarchy import use_hierarchy
from mxkv_hybrid.config import Config
from mxkv_hybrid.errors import ConfigError

from conftest import (
    assert_identical_across_ranks,
    assert_matches_reference,
    bytes_across,
    launch,
    load_ranks,
)


@pytest.mark.parametrize("ranks, group_size", [(4, 2), (6, 3), (6, 2)])
def test_hierarchical_allreduce_matches_a_float64_sum_and_the_flat_one(ranks, group_size):
    job = launch(ranks, "hierarchical.py", str(group_size), timeout=240)
    assert job.returncode == 0, job.output
    groups = ranks // group_size
    assert job.lines_of(0)[-1] == f"CHECKED 410 in {groups} groups of {group_size}", job.output


def test_gluon_training_in_groups(job_dir, references):
    """Mode allreduce over 2 groups of 2 (MXKV_GROUP_SIZE): hierarchical or flat, the
    weights are identical on every rank and match one process on the union of the batches;
    the hierarchical one sends fewer bytes across the groups (the summary line says)."""
    reference = references.weights("train_gluon.py", "--reference", "4")
    across = {}
    for hierarchy in ("on", "off"):
        job = launch(
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


def test_auto_is_hierarchical_for_several_groups_of_equal_size():
    assert use_hierarchy("auto", [0, 0, 1, 1])
    assert use_hierarchy("auto", [0, 0, 0, 1, 1, 1])
    assert not use_hierarchy("auto", [0, 0, 0, 0])  # one group (one host)
    assert not use_hierarchy("auto", [0, 0, 1, 1, 2])  # unequal: flat
    assert not use_hierarchy("off", [0, 0, 1, 1])
    assert use_hierarchy("on", [0, 0, 0])


def test_on_refuses_groups_of_unequal_size():
    with pytest.raises(
        ConfigError,
        match="MXKV_HIERARCHY=on needs groups of equal size, but "
        "the 5 ranks form groups of 2, 2, 1 ranks",
    ):
        use_hierarchy("on", [0, 0, 1, 1, 2])


def test_the_knob():
    assert Config.from_environment({}).hierarchy == "auto"
    with pytest.raises(ConfigError, match="MXKV_HIERARCHY='yes' is invalid: expected one of: auto"):
        Config.from_environment({"MXKV_HIERARCHY": "yes"})

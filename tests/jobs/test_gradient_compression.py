"""Gradient compression through the hybrid store (tests/workers/compression.py: each step's
result equal to a quantiser summed over every rank's gradients, MXNet's own for flat
2-bit, numpy's for the rest, so no check of the sum passes without the exchange; this
rank's residuals equal to numpy's; tests/workers/sync_compression.py: mode sync's group
sums through the servers as summed codes; tests/workers/async_compression.py: mode
async's codes decoded and applied by the servers).
MXNet's `--gc-type 2bit` script path, in every mode: tests/jobs/test_client_matrix.py."""

import pytest

from support.checks import assert_checks_passed
from support.warm_ranks import launch_in

EXPECTED_CHECKS = 6
HIERARCHICAL = {"MXKV_GROUP_SIZE": "2", "MXKV_HIERARCHY": "on"}


@pytest.mark.parametrize("num_ranks,average", [(3, "0"), (2, "1")])
def test_two_bit_equals_mxnets_quantiser_step_by_step(warm_ranks, job_dir, num_ranks, average):
    job = launch_in(
        warm_ranks,
        num_ranks,
        "compression.py",
        env={"MXKV_MODE": "allreduce", "MXKV_AVERAGE": average},
    )
    assert_checks_passed(job, num_ranks, EXPECTED_CHECKS)


@pytest.mark.parametrize("kind", ["2bit", "1bit"])
def test_compression_of_group_sums_equals_numpys_quantiser_step_by_step(warm_ranks, job_dir, kind):
    """Hierarchical allreduce, 2 groups of 2: each group's sum is quantised (a slice at each
    of its ranks) and only the codes cross between groups; every step equals numpy's
    quantiser of each group's sum, residuals included (the sum of a group's slices).
    Sabotaged (a group decoding only its own codes), 4 of the 6 checks fail on every rank."""
    job = launch_in(
        warm_ranks,
        4,
        "compression.py",
        env=dict(HIERARCHICAL, MXKV_MODE="allreduce", COMPRESSION=kind),
    )
    assert_checks_passed(job, 4, EXPECTED_CHECKS)


def test_one_bit_equals_numpys_scaled_sign_step_by_step(warm_ranks, job_dir):
    """Flat, 3 ranks averaged: each rank's values quantised to a sign and a scale per 256."""
    job = launch_in(
        warm_ranks, 3, "compression.py", env={"MXKV_MODE": "allreduce", "COMPRESSION": "1bit"}
    )
    assert_checks_passed(job, 3, EXPECTED_CHECKS)


@pytest.mark.parametrize("kind", ["2bit", "1bit"])
def test_async_servers_decode_each_groups_codes_and_apply_them_at_once(warm_ranks, job_dir, kind):
    """Mode async, 2 groups of 2 in one job, 2 servers, MXNet's big-array bound at 1000 so
    that one weight is split over both servers: the groups push in turn, and after every
    push the servers' weights equal numpy's SGD on that group's quantised sum (residual
    per group, quantised part by part as MXNet splits the weight); a leader pushes only
    the codes and the push counter; a float16 weight crosses as it is; a Trainer's
    compression_params reach the store. Each rank's gradients are its own: no group alone
    gives the weights. Sabotaged (the servers not applying decoded codes), the step check
    fails."""
    job = launch_in(
        warm_ranks,
        4,
        "async_compression.py",
        env={"MXKV_MODE": "async", "COMPRESSION": kind, "MXNET_KVSTORE_BIGARRAY_BOUND": "1000"},
        launcher_options=["--group-size", "2", "--servers", "2", "--one-job"],
    )
    assert_checks_passed(job, 4, 4)


@pytest.mark.parametrize("mode,kind", [("easgd", "2bit"), ("easgd", "1bit"), ("lasgd", "2bit")])
def test_averaging_modes_quantise_each_ranks_gradients_where_ranks_sum_them(
    warm_ranks, job_dir, mode, kind
):
    """easgd, 2 groups of 2 (one job, 1 server): each rank's gradients quantised, its
    residual kept, the codes summed in its group; lasgd in the warm-up: over all 4 ranks.
    Every step equals numpy's quantiser summed over those ranks (a rank alone cannot: its
    gradients are its own), and a Trainer with compression_params keeps them equal."""
    options = ["--group-size", "2", "--servers", "1", "--one-job"] if mode == "easgd" else []
    job = launch_in(
        warm_ranks,
        4,
        "averaging_compression.py",
        env={"MXKV_MODE": mode, "COMPRESSION": kind, "MXKV_WARMUP_STEPS": "100"},
        launcher_options=options,
    )
    assert_checks_passed(job, 4, 4)


@pytest.mark.parametrize("kind", ["2bit", "1bit"])
def test_sync_sums_each_groups_quantised_sum_through_the_servers(warm_ranks, job_dir, kind):
    """Mode sync, 2 groups of 2, 2 servers: every step equals numpy's quantiser of each
    group's sum (residual per group) summed over the groups and averaged, a leader pushes
    the words csrc/code_sums.h documents, other types are refused, and the optimizer (on the
    workers) applies the decoded sum. A group's own codes alone cannot give the sum (each
    rank's gradients are its own): sabotaged (the leaders not crossing), 3 of the 4 checks
    fail."""
    job = launch_in(
        warm_ranks,
        4,
        "sync_compression.py",
        env={"MXKV_MODE": "sync", "COMPRESSION": kind},
        launcher_options=["--group-size", "2", "--servers", "2"],
    )
    assert_checks_passed(job, 4, 4)

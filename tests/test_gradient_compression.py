"""MXNet's 2-bit gradient compression through the hybrid store (tests/workers/two_bit.py:
each step's result equal to MXNet's own quantiser summed over every rank's gradients, so
no check of the sum passes without the exchange; this rank's residuals equal to a numpy
quantiser's), and its refusal where a mode does not take it yet. MXNet's `--gc-type 2bit`
script path: tests/test_unmodified_scripts.py."""
import pytest

from conftest import assert_checks_passed, launch

EXPECTED_CHECKS = 6


@pytest.mark.parametrize("num_ranks,average", [(3, "0"), (2, "1")])
def test_two_bit_equals_mxnets_quantiser_step_by_step(job_dir, num_ranks, average):
    job = launch(num_ranks, "two_bit.py", env={"MXKV_MODE": "allreduce", "MXKV_AVERAGE": average})
    assert_checks_passed(job, num_ranks, EXPECTED_CHECKS)


def test_two_bit_of_group_sums_equals_numpys_quantiser_step_by_step(job_dir):
    """Hierarchical allreduce, 2 groups of 2: each group's sum is quantised (a slice at each
    of its ranks) and only the codes cross between groups; every step equals numpy's
    quantiser of each group's sum, residuals included (the sum of a group's slices)."""
    job = launch(4, "two_bit.py", env={"MXKV_MODE": "allreduce", "MXKV_GROUP_SIZE": "2",
                                       "MXKV_HIERARCHY": "on"})
    assert_checks_passed(job, 4, EXPECTED_CHECKS)


def test_modes_without_compression_refuse_it_naming_the_fix(job_dir):
    job = launch(2, "two_bit.py", env={"MXKV_MODE": "lasgd"})
    assert job.returncode != 0
    assert ("set_gradient_compression: MXKV_MODE=lasgd does not take it yet (modes that do: "
            "allreduce)") in job.output, job.output

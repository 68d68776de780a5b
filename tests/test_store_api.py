"""The KVStore API as scripts use it, on a real 2- and 3-rank job."""
import pytest

from conftest import assert_checks_passed, launch

EXPECTED_CHECKS = 10


@pytest.mark.parametrize("num_ranks", [2, 3])
def test_store_api(job_dir, num_ranks):
    job = launch(num_ranks, "store_api.py", str(job_dir))
    assert_checks_passed(job, num_ranks, EXPECTED_CHECKS)

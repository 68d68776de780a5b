"""The KVStore API as scripts use it, on a real 2- and 3-rank job."""
import pytest

from conftest import launch

EXPECTED_CHECKS = 10


@pytest.mark.parametrize("num_ranks", [2, 3])
def test_store_api(job_dir, num_ranks):
    job = launch(num_ranks, "store_api.py", str(job_dir))
    assert job.returncode == 0, job.output
    for rank in range(num_ranks):
        checks = [line for line in job.lines_of(rank) if line.startswith("CHECK")]
        assert len(checks) == EXPECTED_CHECKS, job.output
        assert all(line.endswith(" ok") for line in checks), "\n".join(checks)

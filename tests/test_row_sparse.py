"""row_sparse arrays through the store (tests/workers/row_sparse.py's checks, each against
numpy sums of every rank's rows: a rank alone has a twentieth of the rows, so no check of
a sum passes without the exchange), and the refusal in modes that do not take them yet."""
import pytest

from conftest import launch

EXPECTED_CHECKS = 14


@pytest.mark.parametrize("num_ranks,average", [(4, "1"), (3, "0")])
def test_row_sparse_through_the_store(job_dir, num_ranks, average):
    job = launch(num_ranks, "row_sparse.py", str(job_dir),
                 env={"MXKV_MODE": "allreduce", "MXKV_AVERAGE": average})
    assert job.returncode == 0, job.output
    for rank in range(num_ranks):
        checks = [line for line in job.lines_of(rank) if line.startswith("CHECK")]
        assert len(checks) == EXPECTED_CHECKS, job.output
        assert all(line.endswith(" ok") for line in checks), "\n".join(checks)


def test_modes_without_row_sparse_refuse_it_naming_the_fix(job_dir):
    job = launch(2, "row_sparse.py", str(job_dir), env={"MXKV_MODE": "lasgd"})
    assert job.returncode != 0
    assert ("pushpull: row_sparse arrays are not supported in MXKV_MODE=lasgd yet (modes that "
            "take them: allreduce): set MXKV_MODE=allreduce") in job.output, job.output

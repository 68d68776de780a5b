"""Remote memory (comm/remote_memory.py, csrc/remote_array.h) on a real 3-rank job:
every fact the worker checks against numpy holds on every rank."""

from support.warm_ranks import launch_in

LAYOUTS, SIZES, DTYPES = 3, 4, 2
EXPECTED_CHECKS = DTYPES * SIZES * LAYOUTS * 4 + 2 + 2 + 5 + 3


def test_remote_arrays_read_write_and_accumulate_exactly(warm_ranks, job_dir):
    job = launch_in(warm_ranks, 3, "remote_array.py", timeout=120)
    assert job.returncode == 0, job.output
    for rank in range(3):
        checks = [line for line in job.lines_of(rank) if line.startswith("CHECK")]
        assert len(checks) == EXPECTED_CHECKS, job.output
        failed = [line for line in checks if not line.endswith(" ok")]
        assert not failed, "\n".join(failed)

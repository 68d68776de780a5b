"""The KVStore API as scripts use it, on real jobs in every mode (tests/workers/store_api.py:
what every mode does alike, and what each does where they differ;
docs/guides/kvstore-api.md, "The KVStore API in every mode")."""

import pytest

from support.checks import assert_checks_passed
from support.warm_ranks import launch_in

EXPECTED_CHECKS = 10


@pytest.mark.parametrize(
    "mode,num_ranks,options",
    [
        ("allreduce", 2, []),
        ("allreduce", 3, []),
        ("sync", 4, ["--group-size", "2", "--servers", "2"]),
        ("async", 4, ["--group-size", "2", "--servers", "1", "--one-job"]),
        ("easgd", 4, ["--group-size", "2", "--servers", "1", "--one-job"]),
        ("lasgd", 2, []),
    ],
)
def test_store_api(warm_ranks, job_dir, mode, num_ranks, options):
    job = launch_in(
        warm_ranks,
        num_ranks,
        "store_api.py",
        str(job_dir),
        env={"MXKV_MODE": mode},
        launcher_options=options,
    )
    assert_checks_passed(job, num_ranks, EXPECTED_CHECKS)

"""`mxkv-launch --log-level warning` on a real job of 2 ranks: the launcher's and the ranks'
info lines are dropped, warnings kept, and the job still trains; without it they show."""

import pytest

from support.jobs import launch


@pytest.mark.parametrize("log_level", [None, "warning"])
def test_a_job_at_warning_level_drops_info_lines_and_still_trains(log_level):
    options = ("--auto",) + (("--log-level", log_level) if log_level else ())
    job = launch(2, "log_levels.py", launcher_options=options)
    assert job.returncode == 0, job.output
    for rank in range(2):
        assert f"RESULT Hybrid rank={rank} of 2 value=[1.5, 1.5, 1.5]" in job.lines_of(rank), (
            job.output
        )
        assert f"mxkv_hybrid: rank {rank} warns" in job.lines_of(rank), job.output
    info_lines = [
        "mxkv-launch --auto: MXKV_AUTO=1 for every rank" in job.output,
        "mxkv_hybrid --auto: kvstore 'local' -> 'hybrid' (2 ranks)" in "\n".join(job.lines_of(0)),
    ]
    assert info_lines == ([False, False] if log_level == "warning" else [True, True]), job.output

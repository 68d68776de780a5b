"""Which GPUs a rank drives (integration/gpus.py), for the ImageNet example
(mxkv_hybrid.rank_gpus) and for unmodified scripts under mxkv-launch --auto (their
--gpus argument rewritten per rank). No GPU is needed: the choice is ids."""

import pytest

from mxkv_hybrid.errors import ConfigError
from mxkv_hybrid.integration.gpus import gpus_of_local_rank, parse_gpus

from conftest import launch


@pytest.mark.parametrize(
    "gpus, local_size, expected",
    [
        ([0, 1, 2, 3], 1, [[0, 1, 2, 3]]),  # a rank alone drives the whole list
        ([0, 1, 2, 3], 4, [[0], [1], [2], [3]]),  # one id per rank: the local rank's
        ([4, 5, 6, 7], 4, [[4], [5], [6], [7]]),
        ([0, 1, 2, 3], 2, [[0, 1], [2, 3]]),  # two per rank
        ([0], 4, [[0], [1], [2], [3]]),  # one id: each rank its own from it
        ([2], 2, [[2], [3]]),
        ([], 4, [[], [], [], []]),  # no GPU: CPU
    ],
)
def test_each_local_rank_gets_its_share(gpus, local_size, expected):
    assert [gpus_of_local_rank(gpus, r, local_size) for r in range(local_size)] == expected


def test_an_ambiguous_list_is_refused_with_the_rules():
    with pytest.raises(
        ConfigError,
        match=r"--gpus 0,1,2 lists 3 GPUs for the 2 ranks on this "
        r"host: give one id .*a multiple of 2",
    ):
        gpus_of_local_rank([0, 1, 2], 0, 2)
    with pytest.raises(ConfigError, match="expected GPU ids separated by commas"):
        parse_gpus("0;1")
    assert parse_gpus(" 0, 1 ") == [0, 1] and parse_gpus("") == []


def test_auto_gives_each_rank_its_gpu_and_rank_gpus_agrees(job_dir):
    job = launch(2, "show_gpus.py", "--gpus", "0,1", "--pick", "0", launcher_options=["--auto"])
    assert job.returncode == 0, job.output
    for rank in (0, 1):
        lines = job.lines_of(rank)
        assert f"local rank {rank} of 2: --gpus '{rank}', rank_gpus('0') = [{rank}]" in lines, (
            job.output
        )
        assert any(f"--gpus 0,1 -> --gpus {rank}" in line for line in lines), job.output


def test_without_auto_the_arguments_are_the_scripts_own(job_dir):
    job = launch(2, "show_gpus.py", "--gpus=0,1,2,3", "--pick", "0,1,2,3")
    assert job.returncode == 0, job.output
    assert "local rank 1 of 2: --gpus '0,1,2,3', rank_gpus('0,1,2,3') = [2, 3]" in job.lines_of(
        1
    ), job.output


def test_group_jobs_on_one_host_number_their_ranks_on_it(job_dir):
    """Two groups of 2 as their own MPI jobs (mode async): the second job's ranks are local
    ranks 2 and 3 of 4, so `--gpus 0` gives the four ranks four GPUs."""
    job = launch(
        4,
        "show_gpus.py",
        "--pick",
        "0",
        env={"MXKV_MODE": "async"},
        launcher_options=["--group-size", "2", "--servers", "1"],
    )
    assert job.returncode == 0, job.output
    for rank in range(4):
        assert f"local rank {rank} of 4: --gpus '', rank_gpus('0') = [{rank}]" in job.lines_of(
            rank
        ), job.output

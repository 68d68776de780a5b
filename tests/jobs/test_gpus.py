"""Which GPUs each rank drives, on real MPI jobs of 2 and 4 ranks: under mxkv-launch --auto
its --gpus argument is rewritten per rank and mxkv_hybrid.rank_gpus agrees, without --auto
the arguments are the script's own, and group jobs number their ranks on the host.
No GPU is needed: the choice is ids."""

from support.warm_ranks import launch_in


def test_auto_gives_each_rank_its_gpu_and_rank_gpus_agrees(warm_ranks, job_dir):
    job = launch_in(
        warm_ranks, 2, "show_gpus.py", "--gpus", "0,1", "--pick", "0", launcher_options=["--auto"]
    )
    assert job.returncode == 0, job.output
    for rank in (0, 1):
        lines = job.lines_of(rank)
        assert f"local rank {rank} of 2: --gpus '{rank}', rank_gpus('0') = [{rank}]" in lines, (
            job.output
        )
        assert any(f"--gpus 0,1 -> --gpus {rank}" in line for line in lines), job.output


def test_without_auto_the_arguments_are_the_scripts_own(warm_ranks, job_dir):
    job = launch_in(warm_ranks, 2, "show_gpus.py", "--gpus=0,1,2,3", "--pick", "0,1,2,3")
    assert job.returncode == 0, job.output
    assert "local rank 1 of 2: --gpus '0,1,2,3', rank_gpus('0,1,2,3') = [2, 3]" in job.lines_of(
        1
    ), job.output


def test_group_jobs_on_one_host_number_their_ranks_on_it(warm_ranks, job_dir):
    """Two groups of 2 as their own MPI jobs (mode async): the second job's ranks are local
    ranks 2 and 3 of 4, so `--gpus 0` gives the four ranks four GPUs."""
    job = launch_in(
        warm_ranks,
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

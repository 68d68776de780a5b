"""A Slurm allocation on 2 emulated hosts, without -H/--hostfile (launch/host_sources.py):
mxkv-launch reads SLURM_JOB_NODELIST / SLURM_TASKS_PER_NODE and trains 4 ranks, 2 on each
host, to the weights of one process."""

from support.checks import assert_identical_across_ranks, assert_matches_reference, load_ranks
from support.emulated import launch_on, on_emulated_hosts


@on_emulated_hosts
def test_a_slurm_allocation_of_emulated_hosts_trains_across_them(make_cluster, job_dir, references):
    """h[1-2] with 2(x2) tasks, no -H and no -n: 4 ranks, 2 on each host, the same weights
    as one process; the gradients crossed h2's link."""
    cluster = make_cluster(2)
    job = launch_on(
        cluster,
        "h1",
        [],
        ["train_gluon.py", "--out", str(job_dir / "dist")],
        env={"SLURM_JOB_NODELIST": "h[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"},
    )
    assert job.returncode == 0, job.output
    assert "hosts from SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE: h1:2,h2:2" in job.output
    weights = load_ranks(job_dir / "dist", 4)
    assert_identical_across_ranks(weights)
    assert_matches_reference(weights[0], references.weights("train_gluon.py", "--reference", "4"))
    assert cluster.bytes_sent("h2") > sum(w.nbytes for w in weights[0].values())

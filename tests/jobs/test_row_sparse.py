"""row_sparse arrays through the store and the Gluon Trainer in every mode
(tests/workers/row_sparse.py's checks, each against numpy sums of every rank's rows: a
rank alone has a twentieth of the rows, so no check of a sum passes without the
exchange; in modes sync and async the groups' rows meet only on the servers)."""

import numpy as np
import pytest

from support.checks import assert_checks_passed, assert_same_on_every_rank, rank_files
from support.jobs import launch
from support.warm_ranks import launch_in

EXPECTED_CHECKS = 16


@pytest.mark.parametrize(
    "mode,num_ranks,average,options",
    [
        ("allreduce", 4, "1", []),
        ("allreduce", 3, "0", []),
        ("lasgd", 4, "1", []),
        ("easgd", 4, "1", ["--group-size", "2", "--servers", "1", "--one-job"]),
        ("sync", 4, "1", ["--group-size", "2", "--servers", "2"]),
        ("async", 4, "1", ["--group-size", "2", "--servers", "2", "--one-job"]),
    ],
)
def test_row_sparse_through_the_store(warm_ranks, job_dir, mode, num_ranks, average, options):
    """The store's own calls; in the averaging modes values that are not weights are
    summed over all ranks (easgd: in one MPI job) by the same sparse collective."""
    job = launch_in(
        warm_ranks,
        num_ranks,
        "row_sparse.py",
        str(job_dir),
        env={"MXKV_MODE": mode, "MXKV_AVERAGE": average},
        launcher_options=options,
    )
    assert_checks_passed(job, num_ranks, EXPECTED_CHECKS)


# train_sparse_embedding.py: 6 steps, each weight's gradient a sum of up to 32 samples
# (4 ranks x 8), weights below 1 in size: summed in another order, a weight moves by at
# most steps x summands x float32's unit roundoff.
TRAINED_WITHIN = 6 * 32 * 2.0**-24


SYNC_IN_2_GROUPS = {"MXKV_MODE": "sync", "LAUNCHER": "--group-size 2 --servers 2"}
SYNC_GROUP_JOBS = {"MXKV_MODE": "sync", "LAUNCHER": "--group-size 2 --servers 2 --group-jobs"}


@pytest.mark.parametrize(
    "options,env",
    [
        ([], {}),
        (["--sparse-weight"], {}),
        (["--momentum", "0"], {"MXKV_MODE": "lasgd", "MXKV_TAU": "1", "MXKV_LASGD_OVERLAP": "0"}),
        ([], SYNC_IN_2_GROUPS),
        (["--sparse-weight"], SYNC_IN_2_GROUPS),
        ([], SYNC_GROUP_JOBS),
        (["--sparse-weight"], SYNC_GROUP_JOBS),
    ],
    ids=[
        "sparse-gradients",
        "sparse-weight",
        "lasgd-every-step",
        "sync-sparse-gradients",
        "sync-sparse-weight",
        "sync-group-jobs-sparse-gradients",
        "sync-group-jobs-sparse-weight",
    ],
)
def test_a_sparse_embedding_trains_as_one_process_on_the_union_of_the_batches(
    job_dir, references, options, env
):
    """Embedding(sparse_grad=True) (or a row_sparse weight, pulled by rows each step)
    through gluon.Trainer on 4 ranks equals one process on the 4 ranks' batches at once;
    the control, one process on rank 0's batches, is far from it. lasgd averaging after
    every step of plain SGD is the same (the mean of x - lr g_r is x - lr mean(g)). Mode
    sync, 2 groups of 2 (one MPI job, or each group its own: --group-jobs): the gradients
    (or the rows of a row_sparse weight) cross the groups through the servers, which run
    the optimizer (or, updated on the workers, sum them)."""
    assert_trains_as_one_process_on_the_union(
        job_dir,
        references,
        "train_sparse_embedding.py",
        options,
        dict({"MXKV_MODE": "allreduce"}, **env),
    )


@pytest.mark.parametrize(
    "env", [{"MXKV_MODE": "allreduce"}, SYNC_IN_2_GROUPS], ids=["allreduce", "sync-2-groups"]
)
def test_sparse_gradients_updated_on_the_workers_are_refused_as_dist_sync_refuses_them(
    job_dir, env
):
    """MXNet's Trainer raises ValueError for update_on_kvstore=False with row_sparse
    gradients on dist_sync (its nightly dist_sync_kvstore.py checks it); so does the store,
    on every rank, where it can update the weights itself."""
    options = env.get("LAUNCHER", "").split()
    job = launch(
        4,
        "train_sparse_embedding.py",
        "--out",
        str(job_dir),
        "--update-on-kvstore",
        "0",
        env={k: v for k, v in env.items() if k != "LAUNCHER"},
        launcher_options=options,
        timeout=120,
    )
    assert job.returncode != 0, job.output
    assert "Cannot set update_on_kvstore=False on dist kvstore when sparse gradients" in (
        job.output
    ), job.output


@pytest.mark.parametrize(
    "env", [{"MXKV_MODE": "allreduce"}, SYNC_IN_2_GROUPS], ids=["allreduce", "sync-2-groups"]
)
def test_module_with_a_row_sparse_weight_trains_as_one_process_on_the_union(
    job_dir, references, env
):
    """MXNet's Module API as example/sparse/ uses it (csr features, a row_sparse weight
    updated on the store, Module.prepare pulling each batch's rows) on 4 ranks equals one
    process on the 4 ranks' batches; the control, one process on rank 0's, is far from it.
    Each rank's features lie in its own quarter of the rows, so the sums add no float
    rounding beyond the bias's."""
    assert_trains_as_one_process_on_the_union(
        job_dir, references, "train_sparse_module.py", [], env
    )


def assert_trains_as_one_process_on_the_union(
    job_dir, references, worker: str, options, env
) -> None:
    """`worker` on 4 ranks (env's LAUNCHER: mxkv-launch options) writes on every rank the
    weights of one process on the 4 ranks' batches (TRAINED_WITHIN), far from one process
    on rank 0's alone (the control)."""
    env = dict(env)
    launcher_options = env.pop("LAUNCHER", "").split()
    union, alone = references.weights_of_each(
        worker, [*options, "--reference", "4"], [*options, "--reference", "1"]
    )
    job = launch(
        4,
        worker,
        "--out",
        str(job_dir / "dist"),
        *options,
        env=env,
        launcher_options=launcher_options,
    )
    assert job.returncode == 0, job.output
    found = rank_files(job_dir / "dist", range(4))
    assert_same_on_every_rank(found, "")
    for name, reference in union.items():
        assert np.allclose(found[0][name], reference, rtol=0, atol=TRAINED_WITHIN), name
    assert max(np.abs(found[0][n] - alone[n]).max() for n in alone) > 100 * TRAINED_WITHIN


@pytest.mark.parametrize("mode", ["lasgd", "easgd"])
def test_row_sparse_weights_in_the_averaging_modes_are_refused_naming_the_fix(job_dir, mode):
    """A row_sparse weight is updated on the store; the averaging modes update every rank
    (group) apart."""
    options = ["--group-size", "1", "--servers", "1", "--one-job"] if mode == "easgd" else []
    job = launch(
        2,
        "train_sparse_embedding.py",
        "--out",
        str(job_dir),
        "--sparse-weight",
        env={"MXKV_MODE": mode},
        launcher_options=options,
    )
    assert job.returncode != 0
    assert (
        f"row_sparse weights are updated on the store, which MXKV_MODE={mode} does not do"
        in job.output
    ), job.output

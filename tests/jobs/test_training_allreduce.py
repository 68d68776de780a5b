"""Gluon Trainer and Module.fit with kvstore='hybrid' on real MPI jobs: weights are bitwise
identical on every rank and equal, within float tolerance, to one process that trains on
the union of the ranks' batches (each rank initialises differently: the broadcast is tested)."""

import pytest

from support.checks import assert_identical_across_ranks, assert_matches_reference, load_ranks
from support.warm_ranks import launch_in


@pytest.mark.parametrize(
    "num_ranks, options",
    [
        (2, ["--kvstore", "string"]),  # one device, string store
        (4, ["--kvstore", "string"]),
        (2, ["--kvstore", "instance", "--devices", "2"]),  # mx.kv.create + 2 devices
        (2, ["--kvstore", "string", "--update-on-kvstore", "0"]),  # local updates
        (4, ["--kvstore", "instance", "--devices", "2", "--update-on-kvstore", "0"]),
    ],
)
def test_gluon_trainer(warm_ranks, job_dir, references, num_ranks, options):
    job = launch_in(
        warm_ranks, num_ranks, "train_gluon.py", "--out", str(job_dir / "dist"), *options
    )
    assert job.returncode == 0, job.output
    weights = load_ranks(job_dir / "dist", num_ranks)
    assert_identical_across_ranks(weights)
    reference = references.weights("train_gluon.py", "--reference", str(num_ranks))
    assert_matches_reference(weights[0], reference)


@pytest.mark.parametrize(
    "num_ranks, devices, env",
    [
        (2, 1, {}),  # update on the store (the default)
        (4, 1, {}),
        (2, 2, {"MXNET_UPDATE_ON_KVSTORE": "0"}),  # local updates, 2 devices per process
    ],
)
def test_module_fit(warm_ranks, job_dir, references, num_ranks, devices, env):
    job = launch_in(
        warm_ranks,
        num_ranks,
        "train_module.py",
        "--out",
        str(job_dir / "dist"),
        "--devices",
        str(devices),
        env=env,
    )
    assert job.returncode == 0, job.output
    expected = "update_on_kvstore=False" if env else "update_on_kvstore=True"
    assert all(expected in " ".join(job.lines_of(r)) for r in range(num_ranks)), job.output
    weights = load_ranks(job_dir / "dist", num_ranks)
    assert_identical_across_ranks(weights)
    reference = references.weights("train_module.py", "--reference", str(num_ranks))
    assert_matches_reference(weights[0], reference)

"""What the workers send the parameter servers (modes sync and async), on real jobs: an
optimizer class defined in the script, with an LR scheduler of a library that checks MXNet's
version at import (as gluoncv does), trains on the servers as it does in one process; what a
server cannot load ends the job naming it."""

import re

import numpy as np
import pytest

from support.checks import assert_identical_across_ranks, assert_matches_reference, load_ranks
from support.jobs import launch
from support.paths import LIBRARIES as LIBRARIES_FOLDER

LIBRARIES = str(LIBRARIES_FOLDER)


OWN = ("--optimizer", "own")


# sync: two groups summed on the servers; async: one group (no staleness: deterministic)
GROUPS = {"sync": "1", "async": "2"}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_optimizer_of_the_script_with_a_librarys_scheduler_trains_on_the_servers(
    job_dir, references, mode
):
    job = launch(
        2,
        "train_gluon.py",
        "--out",
        str(job_dir / "dist"),
        *OWN,
        env={"MXKV_MODE": mode, "PYTHONPATH": LIBRARIES},
        launcher_options=["--group-size", GROUPS[mode], "--servers", "1"],
    )
    assert job.returncode == 0, job.output
    assert "update_on_kvstore=True" in job.output  # the optimizer ran on the servers
    weights = load_ranks(job_dir / "dist", 2)
    assert_identical_across_ranks(weights)
    assert_matches_reference(
        weights[0], references.weights("train_gluon.py", "--reference", "2", *OWN)
    )


def test_the_optimizer_sent_matters(references):
    """The check above can fail: plain SGD ends elsewhere than the script's optimizer."""
    own, plain = references.weights_of_each(
        "train_gluon.py", ["--reference", "2", *OWN], ["--reference", "2"]
    )
    assert any(not np.allclose(own[n], plain[n], rtol=1e-4, atol=1e-6) for n in own)


def test_a_server_that_cannot_load_the_optimizer_ends_the_job_naming_what_it_lacks(job_dir):
    """The library is importable on the workers only (no PYTHONPATH for the servers): the
    server says what it could not import and exits; the launcher names it; nothing waits."""
    job = launch(
        2,
        "train_gluon.py",
        "--out",
        str(job_dir / "dist"),
        *OWN,
        env={"MXKV_MODE": "sync"},
        launcher_options=["--group-size", "1", "--servers", "1"],
        timeout=120,
    )
    assert job.returncode != 0, job.output
    assert "cannot load the optimizer the workers sent" in job.output, job.output
    assert "No module named 'version_checked'" in job.output, job.output
    assert re.search(r"the parameter server 0 \(pid \d+\) exited with status 1", job.output)
    assert "Exception ignored" not in job.output, job.output
    assert "timed out" not in job.output, job.output

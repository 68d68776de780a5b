"""What the workers send the parameter servers (modes sync and async): an optimizer class
defined in the script, with an LR scheduler of a library that checks MXNet's version at
import (as gluoncv does), trains on the servers as it does in one process; what a server
cannot load ends the job naming it, and what cannot be sent is refused on the worker."""

import re
import threading
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest

from mxkv_hybrid.errors import OptimizerNotSendable
from mxkv_hybrid.ps.by_value import dumps_for_servers

from conftest import assert_identical_across_ranks, assert_matches_reference, launch, load_ranks

LIBRARIES = str(Path(__file__).resolve().parent / "libraries")
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


def test_what_cannot_be_sent_is_refused_naming_it():
    scheduler = mx.lr_scheduler.FactorScheduler(step=10)
    scheduler.lock = threading.Lock()
    optimizer = mx.optimizer.SGD(learning_rate=0.1, lr_scheduler=scheduler)
    with pytest.raises(
        OptimizerNotSendable, match=r"SGD .*cannot be sent to the parameter servers"
    ):
        dumps_for_servers(optimizer)

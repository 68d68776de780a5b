"""MXKV_MODE=async on real jobs of 2 and 4 ranks, groups asynchronous to each other through
real dist_async servers that hold the weights and the optimizer: groups reach a convex
optimum, Module trains, and a stale push is damped (MXKV_ASYNC_DAMPING)."""

import re

import numpy as np
import pytest

from support.checks import assert_identical_across_ranks, load_ranks
from support.convex import CONVEX_LEARNED, CONVEX_STEPS, convex_loss
from support.jobs import launch

ASYNC = {"MXKV_MODE": "async"}


@pytest.mark.parametrize("servers", [1, 2])
def test_async_groups_reach_the_optimum_of_a_convex_problem(job_dir, servers, convex_halves_alone):
    """Each group has half of the features (--halves), so only the servers' model, which
    both groups' updates move, can fit the whole data set: the one every rank takes at the
    end (consensus, once every group's last update landed). A group's own last pull is
    not asserted: a group may finish before the other's first push (timing decides)."""
    job = launch(
        4,
        "train_convex.py",
        str(job_dir),
        str(CONVEX_STEPS),
        "--halves",
        "--consensus",
        env=ASYNC,
        launcher_options=["--group-size", "2", "--servers", str(servers)],
    )
    assert job.returncode == 0, job.output
    for rank in range(4):
        assert convex_loss("\n".join(job.lines_of(rank)), "consensus") < CONVEX_LEARNED, job.output
    # the control: a half alone leaves the other half's weights as they began
    assert min(convex_halves_alone.values()) > CONVEX_LEARNED, convex_halves_alone
    weights = load_ranks(job_dir, 4)
    assert_identical_across_ranks(weights)  # the servers' model, on every rank
    for leader in (0, 2):  # staleness is measured and reported by each group leader
        report = re.search(
            r"(\d+) asynchronous updates; staleness .* mean ([0-9.]+), "
            r"median (\d+), max (\d+)",
            "\n".join(job.lines_of(leader)),
        )
        assert report, job.output
        updates, mean = int(report.group(1)), float(report.group(2))
        assert updates == CONVEX_STEPS
        # each update of the other group falls between two of this leader's pulls at most
        # once: the sum of staleness is at most the other group's CONVEX_STEPS updates
        assert 0 < mean <= 1.0, report.group(0)


def test_async_refuses_updates_on_the_workers(job_dir):
    job = launch(
        2,
        "train_gluon.py",
        "--out",
        str(job_dir),
        "--update-on-kvstore",
        "0",
        env=ASYNC,
        launcher_options=["--group-size", "1", "--servers", "1"],
        timeout=90,
    )
    assert job.returncode != 0
    # MXNet's Trainer refuses this for dist_async with a ValueError at the same point
    assert "Please set update_on_kvstore=True when training in async mode: " in job.output
    assert "MXKV_MODE=async applies the updates on the parameter servers" in job.output, job.output


def test_module_fit_in_async_mode(job_dir):
    """Module passes string keys; the staleness counter (an int key) must not be mixed in."""
    job = launch(
        2,
        "train_module.py",
        "--out",
        str(job_dir),
        env=ASYNC,
        launcher_options=["--group-size", "1", "--servers", "1"],
    )
    assert job.returncode == 0, job.output
    for rank in range(2):
        lines = "\n".join(job.lines_of(rank))
        assert "update_on_kvstore=True" in lines and "asynchronous updates; staleness" in lines, (
            job.output
        )
    for weights in load_ranks(job_dir, 2):
        assert all(np.isfinite(w).all() for w in weights.values())


@pytest.mark.parametrize("damping,stale_weight", [("staleness", -3 - 10 / 4), ("none", -3.0 - 10)])
def test_a_stale_push_is_damped_by_one_over_one_plus_its_staleness(job_dir, damping, stale_weight):
    """Group 1 pushes 10s after 3 updates of group 0 it has not read (tests/workers/
    stale_push.py): with MXKV_ASYNC_DAMPING=staleness the servers' SGD (lr 1) applies 10 /
    (1 + 3); group 0's own pushes, never stale, go undamped. Without damping (MXNet's
    dist_async) the whole 10 lands: the same check fails."""
    job = launch(
        2,
        "stale_push.py",
        env=dict(ASYNC, MXKV_ASYNC_DAMPING=damping),
        launcher_options=["--group-size", "1", "--servers", "1", "--one-job"],
    )
    assert job.returncode == 0, job.output
    assert "weights 0 [-3.0]" in job.lines_of(0), job.output
    assert f"weights 1 [{stale_weight}]" in job.lines_of(1), job.output
    if damping == "staleness":
        assert "damped 0 [0, 0, 0]" in job.lines_of(0), job.output
        assert "damped 1 [3]" in job.lines_of(1), job.output


def servers_sgd(gradients, momentum: float) -> list:
    """The weights after each of `gradients` (scalars) under MXNet's SGD, lr 1, from 0:
    m = momentum m - g; w += m, in float32 as the servers compute."""
    weight, state, seen = np.float32(0), np.float32(0), []
    for gradient in gradients:
        state = np.float32(momentum) * state - np.float32(gradient)
        weight = np.float32(weight + state)
        seen.append(float(weight))
    return seen


@pytest.mark.parametrize(
    "damping,momentum,told",
    [
        ("rate", 1 - 2 * (1 - 0.9), "momentum 0.8 instead of 0.9 (2 groups each push the mean"),
        ("momentum", 0.9 - (1 - 1 / 2), "momentum 0.4 instead of 0.9 (2 groups updating"),
        ("none", 0.9, None),
    ],
)
def test_damping_runs_the_servers_sgd_with_the_momentum_it_names(job_dir, damping, momentum, told):
    """The same stale push under SGD with momentum 0.9, 2 groups: MXKV_ASYNC_DAMPING=rate
    runs the servers' SGD with 1 - 2 (1 - 0.9) = 0.8 (the rate lr / (1 - m) kept per
    sample), momentum with 0.9 - (1 - 1/2) = 0.4, and rank 0 says which; the weights both
    groups read equal numpy's SGD with that momentum, step by step. Without damping, 0.9:
    the same check with 0.8 or 0.4 fails (the weights differ from the second push on)."""
    job = launch(
        2,
        "stale_push.py",
        env=dict(ASYNC, MXKV_ASYNC_DAMPING=damping, MOMENTUM="0.9"),
        launcher_options=["--group-size", "1", "--servers", "1", "--one-job"],
    )
    assert job.returncode == 0, job.output
    expected = servers_sgd([1, 1, 1, 10], momentum)
    seen = {
        group: float(
            re.search(rf"weights {group} \[(\S+)\]", "\n".join(job.lines_of(group))).group(1)
        )
        for group in (0, 1)
    }
    assert seen == {0: expected[2], 1: expected[3]}, (seen, expected, job.output)
    said = told if told is not None else "the servers' SGD runs with momentum"
    assert (said in job.output) == (told is not None), job.output


@pytest.mark.parametrize("mode", ["async", "easgd"])
def test_consensus_after_an_inference_forward_writes_into_conv1d_weights(job_dir, mode):
    """An inference forward leaves a Conv1D weight in MKLDNN's layout, which MXNet 1.9.1
    cannot copy into: the consensus that pulls the servers' weights (async) or the centre
    (easgd) into it ended with 'Check failed: to.IsDefaultData()' (seen in the mnist1d
    study; control: this test, both modes). The weights are put back in the default
    layout first: every rank ends on the same weights."""
    job = launch(
        2,
        "consensus_after_inference.py",
        str(job_dir),
        env={"MXKV_MODE": mode},
        launcher_options=["--group-size", "1", "--servers", "1", "--one-job"],
    )
    assert job.returncode == 0, job.output
    assert_identical_across_ranks(load_ranks(job_dir, 2))

"""Arrays on a device other than `cpu` take the staging path a GPU's arrays take (pinned
host buffers, MXNet's copies): on real MPI jobs of 2 and 3 ranks, Gluon and Module on
[cpu_pinned(0), cpu_pinned(1)] train to the same bits as on [cpu(0), cpu(1)], on every rank,
in every mode, and overlapped (MXKV_OVERLAP=1) in mode allreduce, where it applies."""

import re

import numpy as np
import pytest

from support.checks import assert_identical_across_ranks, load_ranks
from support.jobs import launch

# mode -> (environment, mxkv-launch options for 2 and 3 ranks: groups of 1, and of 2 and 1)
MODES = {
    "allreduce": ({}, lambda ranks: []),
    "sync": ({}, lambda ranks: ["--group-size", str(ranks - 1), "--servers", "1"]),
    # synchronous EASGD: the centre moves by the sum of both groups' exchanges, in any
    # order, so two runs end on the same bits (asynchronous exchanges land in any order)
    "easgd": (
        {"MXKV_EASGD_SYNC": "1", "MXKV_TAU": "2"},
        lambda ranks: ["--group-size", str(ranks - 1), "--servers", "1", "--one-job"],
    ),
    "lasgd": ({"MXKV_TAU": "2"}, lambda ranks: []),
}


SCRIPTS = {"train_gluon.py": ["--consensus"], "train_module.py": ["--averaging-checks"]}


def train(job_dir, script, mode, ranks, context, overlap="0"):
    """The weights of every rank, checked identical, and each rank's staged bytes."""
    env, options = MODES[mode]
    out = job_dir / f"{script}-{context}-overlap{overlap}"
    consensus = SCRIPTS[script] if mode in ("easgd", "lasgd") else []
    job = launch(
        ranks,
        script,
        "--out",
        str(out),
        "--devices",
        "2",
        "--context",
        context,
        *consensus,
        env=dict(env, MXKV_MODE=mode, MXKV_OVERLAP=overlap),
        launcher_options=options(ranks),
    )
    assert job.returncode == 0, job.output
    staged = [
        int(found.group(1))
        for r in range(ranks)
        for line in job.lines_of(r)
        for found in [re.search(r"staged_bytes=(\d+)", line)]
        if found
    ]
    assert len(staged) == ranks, job.output
    overlapped = re.findall(r"overlapped_buckets=(\d+)", job.output)
    assert len(overlapped) == ranks and all((int(n) > 0) == (overlap == "1") for n in overlapped)
    weights = load_ranks(out, ranks)
    assert_identical_across_ranks(weights)
    return weights[0], staged


# every (script, mode) pair once, the rank counts alternating so that every mode and
# every script runs with both (was the full 16-job product: 290 s of CI's suite)
PAIRS = [
    (script, mode, 2 + (i + j) % 2)
    for i, script in enumerate(SCRIPTS)
    for j, mode in enumerate(MODES)
]


@pytest.mark.parametrize("script, mode, ranks", PAIRS)
def test_cpu_pinned_devices_train_to_the_bits_of_cpu_devices(job_dir, script, mode, ranks):
    on_cpu, none_staged = train(job_dir, script, mode, ranks, "cpu")
    assert none_staged == [0] * ranks
    # MXKV_OVERLAP reduces the gradients behind the engine in mode allreduce (the other modes
    # reduce after backward): there the staging copies are engine operations between
    # backward and the overlapped buckets
    for overlap in ["0", "1"] if mode == "allreduce" else ["0"]:
        on_pinned, staged = train(job_dir, script, mode, ranks, "cpu_pinned", overlap)
        assert all(n > 0 for n in staged), staged  # the staging path ran on every rank
        assert on_pinned.keys() == on_cpu.keys()
        for name in on_cpu:
            assert np.array_equal(on_pinned[name], on_cpu[name]), (name, overlap)

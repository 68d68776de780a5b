"""MXKV_SUMMARY_EVERY: every k steps the first rank of the ranks in lockstep prints one
line whose byte counts are exact for the model of train_steps.py (a weight of 3 floats
and a bias: 16 bytes of gradient a step) and which names the rank that computes longest.
A 16-byte bucket takes recursive doubling (the shipped table): on 2 ranks each sends it
once; a broadcast is counted as a pipeline from its root (the root sends it once)."""

import re

import pytest

from mxkv_hybrid.plan.summary_reader import read_summaries

from support.warm_ranks import launch_in

STEPS, EVERY, SLOW_MS = 10, 5, 100
GRADIENT = 16  # bytes
SETTINGS = 16  # the servers' optimizer: learning rate and rescale_grad (float64), sent once
# bytes across groups that only the first window has: each leader's settings for the servers'
# optimizer (sync: both groups in one line; async: one line per group)
FIRST_WINDOW = {"sync": 2 * SETTINGS, "async": SETTINGS}


# case (mode-variant): (ranks, launcher options, knobs,
#                       {printing rank: (ranks summarised, bytes inside, across)})
CASES = {
    # one group (one host): 2 ranks each send 16 bytes
    "allreduce": (2, (), {}, {0: (2, 2 * GRADIENT, 0)}),
    # two groups of 2 (flat; hierarchical below): ranks 0-1 | 2-3, recursive doubling sends
    # 16 bytes from every rank to the partner at distance 1 (inside) and 2 (across)
    "allreduce-groups": (
        4,
        (),
        {"MXKV_GROUP_SIZE": "2", "MXKV_HIERARCHY": "off"},
        {0: (4, 4 * GRADIENT, 4 * GRADIENT)},
    ),
    # hierarchical: a 2-rank ring reduce-scatter and allgather inside each group (8 bytes
    # each way per rank), then 8-byte slices across groups (recursive doubling: 8 per rank)
    "allreduce-hierarchical": (
        4,
        (),
        {"MXKV_GROUP_SIZE": "2", "MXKV_HIERARCHY": "on"},
        {0: (4, 4 * GRADIENT, 4 * GRADIENT // 2)},
    ),
    # per group: 2 ranks x 16 into the group allreduce + 16 of the weights' broadcast;
    # across: 2 leaders x (push 16 + pull 16), and in the first window the optimizer's settings
    "sync": (
        4,
        ("--servers", "1", "--group-size", "2"),
        {},
        {0: (4, 2 * 3 * GRADIENT, 2 * 2 * GRADIENT)},
    ),
    # each group on its own: 2 ranks x 16 + 16 of the weights' broadcast; its leader pushes
    # 16 + 4 (the staleness counter) and pulls 16 + 4; as separate group jobs (async's
    # default layout) also the finish line's tally, 2 groups x 2 floats, pushed and pulled
    "async": (
        4,
        ("--servers", "1", "--group-size", "2"),
        {},
        {
            0: (2, 3 * GRADIENT, 2 * (GRADIENT + 4 + 16)),
            2: (2, 3 * GRADIENT, 2 * (GRADIENT + 4 + 16)),
        },
    ),
    # easgd over remote memory, 2 groups of 1, each printing its own line, an exchange every
    # step: the leader reads the centre's 4 floats and adds 4, of which the other leader's
    # window holds 2 (8 bytes); the centre's first value is written before the first window
    "easgd-rma": (
        2,
        ("--group-size", "1"),
        {"MXKV_TRANSPORT": "rma", "MXKV_TAU": "1"},
        {0: (1, 0, 8 + 8), 1: (1, 0, 8 + 8)},
    ),
    # gradients stay local; after every update (tau 1) the 16 bytes of weights are averaged
    # over the 2 ranks, blocking, so every average lands in its own step's line
    "lasgd": (2, (), {"MXKV_TAU": "1", "MXKV_LASGD_OVERLAP": "0"}, {0: (2, 2 * GRADIENT, 0)}),
}


@pytest.mark.parametrize("case", CASES)
def test_the_summary_counts_every_byte_and_names_the_slow_rank(warm_ranks, case):
    num_ranks, options, knobs, printers = CASES[case]
    mode = case.split("-")[0]
    slow = num_ranks - 1
    job = launch_in(
        warm_ranks,
        num_ranks,
        "train_steps.py",
        "--steps",
        str(STEPS),
        "--compute-ms",
        f"{slow}:{SLOW_MS}",
        launcher_options=options,
        env={"MXKV_MODE": mode, "MXKV_SUMMARY_EVERY": str(EVERY), **knobs},
    )
    assert job.returncode == 0, job.output
    for rank in range(num_ranks):
        lines = [line for line in job.lines_of(rank) if "summary" in line]
        if rank not in printers:
            assert lines == [], job.output
            continue
        ranks, inside, across = printers[rank]
        assert len(lines) == STEPS // EVERY, job.output
        for window, line in enumerate(lines):
            steps = f"steps {window * EVERY + 1}-{(window + 1) * EVERY}, {ranks} rank(s)"
            assert steps in line, line
            first = FIRST_WINDOW.get(case, 0) / EVERY if window == 0 else 0
            assert (
                f"{inside} B sent inside groups and {across + first:.0f} B across groups" in line
            ), line
            assert ("summary: group" in line) == (mode in ("async", "easgd")), line
            # async: the staleness of the window's pushes, one per step
            assert (f"staleness of {EVERY} push(es)" in line) == (mode == "async"), line
            if slow in range(rank, rank + ranks):  # the slow rank is in this line's ranks
                # (a line of one rank names no slowest rank: its mean is that rank's time)
                pattern = (
                    rf"slowest rank {slow} computes ([\d.]+) ms"
                    if ranks > 1
                    else r"per step: compute ([\d.]+) ms"
                )
                computes = re.search(pattern, line)
                assert computes and float(computes.group(1)) >= SLOW_MS, line
    if case == "allreduce":  # the planner reads the lines it prints (--from-summary)
        figures = read_summaries(job.output)
        assert figures.lines == STEPS // EVERY
        assert figures.compute_ms + figures.straggler_ms >= SLOW_MS > figures.compute_ms
    weights = {line.split("weight ")[1] for line in job.output.splitlines() if "took" in line}
    if mode not in ("async", "easgd"):  # (there each group's weights are its own)
        assert len(weights) == 1, job.output  # the summary does not change the training

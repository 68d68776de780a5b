"""MXKV_SUMMARY_EVERY: every k steps the first rank of the ranks in lockstep prints one
line whose byte counts are exact for the model of train_steps.py (a weight of 3 floats
and a bias: 16 bytes of gradient a step) and which names the rank that computes longest.
A 16-byte bucket takes recursive doubling (the shipped table): on 2 ranks each sends it
once; a broadcast is counted as a pipeline from its root (the root sends it once)."""
import re

import pytest

from conftest import launch

STEPS, EVERY, SLOW_MS = 10, 5, 100
GRADIENT = 16  # bytes
SETTINGS = 16  # the servers' optimizer: learning rate and rescale_grad (float64), sent once


# mode: (ranks, launcher options, knobs, {printing rank: (ranks summarised, bytes inside, across)})
CASES = {
    # one group (one host): 2 ranks each send 16 bytes
    "allreduce": (2, (), {}, {0: (2, 2 * GRADIENT, 0)}),
    # two groups of 2 (flat; hierarchical below): ranks 0-1 | 2-3, recursive doubling sends
    # 16 bytes from every rank to the partner at distance 1 (inside) and 2 (across)
    "allreduce-groups": (4, (), {"MXKV_GROUP_SIZE": "2", "MXKV_HIERARCHY": "off"},
                         {0: (4, 4 * GRADIENT, 4 * GRADIENT)}),
    # hierarchical: a 2-rank ring reduce-scatter and allgather inside each group (8 bytes
    # each way per rank), then 8-byte slices across groups (recursive doubling: 8 per rank)
    "allreduce-hierarchical": (4, (), {"MXKV_GROUP_SIZE": "2", "MXKV_HIERARCHY": "on"},
                               {0: (4, 4 * GRADIENT, 4 * GRADIENT // 2)}),
    # per group: 2 ranks x 16 into the group allreduce + 16 of the weights' broadcast;
    # across: 2 leaders x (push 16 + pull 16), and in the first window the optimizer's settings
    "sync": (4, ("--servers", "1", "--group-size", "2"), {},
             {0: (4, 2 * 3 * GRADIENT, 2 * 2 * GRADIENT)}),
    # each group on its own: 2 ranks x 16 + 16 of the weights' broadcast; its leader pushes
    # 16 + 4 (the staleness counter) and pulls 16 + 4; as separate group jobs (async's
    # default layout) also the finish line's tally, 2 groups x 2 floats, pushed and pulled
    "async": (4, ("--servers", "1", "--group-size", "2"), {},
              {0: (2, 3 * GRADIENT, 2 * (GRADIENT + 4 + 16)),
               2: (2, 3 * GRADIENT, 2 * (GRADIENT + 4 + 16))}),
    # gradients stay local; after every update (tau 1) the 16 bytes of weights are averaged
    # over the 2 ranks, blocking, so every average lands in its own step's line
    "lasgd": (2, (), {"MXKV_TAU": "1", "MXKV_LASGD_OVERLAP": "0"}, {0: (2, 2 * GRADIENT, 0)}),
}


def leaders_in(mode: str, ranks: int) -> int:
    """Group leaders (groups of 2) among `ranks` summarised ranks, in the modes whose
    servers run the optimizer (else 0)."""
    return ranks // 2 if mode in ("sync", "async") else 0


@pytest.mark.parametrize("mode", CASES)
def test_the_summary_counts_every_byte_and_names_the_slow_rank(mode):
    num_ranks, options, knobs, printers = CASES[mode]
    mode = mode.split("-")[0]
    slow = num_ranks - 1
    job = launch(num_ranks, "train_steps.py", "--steps", str(STEPS), "--compute-ms", f"{slow}:{SLOW_MS}",
                 launcher_options=options,
                 env={"MXKV_MODE": mode, "MXKV_SUMMARY_EVERY": str(EVERY), **knobs})
    assert job.returncode == 0, job.output
    for rank in range(num_ranks):
        lines = [line for line in job.lines_of(rank) if "summary" in line]
        if rank not in printers:
            assert lines == [], job.output
            continue
        ranks, inside, across = printers[rank]
        assert len(lines) == STEPS // EVERY, job.output
        for window, line in enumerate(lines):
            assert f"steps {window * EVERY + 1}-{(window + 1) * EVERY}, {ranks} rank(s)" in line, line
            # sync, async: each leader sends the servers' optimizer its settings at step 1
            settings = SETTINGS * leaders_in(mode, ranks) / EVERY if window == 0 else 0
            assert f"{inside} B sent inside groups and {across + settings:.0f} B across groups" \
                in line, line
            assert ("summary: group" in line) == (mode == "async"), line
            if slow in range(rank, rank + ranks):  # the slow rank is in this line's ranks
                computes = re.search(rf"slowest rank {slow} computes ([\d.]+) ms", line)
                assert computes and float(computes.group(1)) >= SLOW_MS, line
    weights = {line.split("weight ")[1] for line in job.output.splitlines() if "took" in line}
    if mode != "async":  # (async: each group's weights are its own)
        assert len(weights) == 1, job.output  # the summary does not change the training

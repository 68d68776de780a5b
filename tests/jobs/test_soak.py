"""Load and soak (2 ranks): 10,000 small keys and 256 MiB of huge keys reduce correctly;
1,000 steps of a small model end with the same weights on both ranks and without memory
growth after warm-up."""

import json

from support.warm_ranks import launch_in

LEAK_TOLERANCE_MIB = 4  # seen: 0.08 MiB; a leak of 5 KiB a step (900 steps) exceeds it


def results(job, rank: int) -> dict:
    rows = [json.loads(line) for line in job.lines_of(rank) if line.startswith("{")]
    return {row["test"]: row for row in rows}


def test_many_keys_huge_keys_and_a_thousand_steps(warm_ranks):
    job = launch_in(warm_ranks, 2, "soak.py", timeout=240)
    assert job.returncode == 0, job.output
    per_rank = [results(job, rank) for rank in range(2)]
    for found in per_rank:
        assert found["many_keys"]["max_error"] == 0, found
        assert found["huge_keys"]["mib"] == 256 and found["huge_keys"]["max_error"] == 0, found
        steps = found["steps"]
        growth = steps["rss_end_mib"] - steps["rss_after_warmup_mib"]
        assert growth < LEAK_TOLERANCE_MIB, f"memory grew {growth:.1f} MiB over 900 steps: {steps}"
    assert per_rank[0]["steps"]["weights"] == per_rank[1]["steps"]["weights"], "ranks drifted"

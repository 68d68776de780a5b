"""MXKV_TIMELINE: the launcher merges every rank's events into one Chrome trace, in which
each training step's pushpull holds its bucket's pack, allreduce and unpack, and (mode
sync) the group leaders' parameter-server exchanges appear."""

import json

import pytest

from support.jobs import launch

STEPS = 10


def spans(events, rank: int, name: str) -> list:
    return [e for e in events if e.get("pid") == rank and e["name"] == name and e["ph"] == "X"]


@pytest.mark.parametrize("mode", ["allreduce", "sync"])
def test_every_step_and_bucket_is_on_the_merged_timeline(job_dir, mode):
    path = job_dir / "trace.json"
    options = ("--servers", "1", "--group-size", "1") if mode == "sync" else ()
    job = launch(
        2,
        "train_steps.py",
        "--steps",
        str(STEPS),
        launcher_options=options,
        env={"MXKV_MODE": mode, "MXKV_TIMELINE": str(path)},
    )
    assert job.returncode == 0, job.output
    assert "timeline of 2 rank(s)" in job.output and str(path) in job.output, job.output
    assert [p.name for p in job_dir.iterdir()] == ["trace.json"]  # the parts were merged
    events = json.loads(path.read_text())["traceEvents"]
    for rank in range(2):
        names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["pid"] == rank]
        assert names and names[0].startswith(f"rank {rank} ("), names
        steps = spans(events, rank, "pushpull")
        if mode == "allreduce":
            # one fused bucket a step: weight (3 floats) and bias (1)
            assert len(steps) == STEPS, [e["name"] for e in events if e.get("pid") == rank]
            for part in ("pack", "allreduce", "unpack"):
                buckets = spans(events, rank, part)
                assert len(buckets) == STEPS and all(b["args"]["bytes"] == 16 for b in buckets)
                for bucket, step in zip(buckets, steps):  # inside its step's pushpull
                    assert (
                        step["ts"]
                        <= bucket["ts"]
                        <= bucket["ts"] + bucket["dur"]
                        <= step["ts"] + step["dur"] + 1
                    ), (bucket, step)
            assert all(
                b["args"]["algorithm"] in ("ring", "rhd", "rd", "mpi")
                for b in spans(events, rank, "allreduce")
            )
        else:  # both ranks lead a group of one: the sums go through the server
            assert len(steps) >= STEPS  # (the group's reduce and broadcast are collectives too)
            exchanges = spans(events, rank, "parameter server push and pull")
            assert len(exchanges) == STEPS, [e["name"] for e in events if e.get("pid") == rank]

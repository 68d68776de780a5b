"""The planner's command line (`python -m mxkv_hybrid.plan`) as a real process: its table and
recommendation, compute and stragglers read from a job's step summaries, --measure timing a
model here, and bad input refused with what to do."""

import json
import subprocess
import sys

import pytest

from mxkv_hybrid.plan.cluster import Cluster, Link
from mxkv_hybrid.plan.mode_costs import Planner, Workload
from mxkv_hybrid.plan.model_sizes import array_bytes

SUMMARY = (
    "[0] mxkv_hybrid summary: steps {first}-{last}, 2 rank(s), per step: compute {mean} ms, "
    "communication 0.40 ms (means over ranks), 32 B sent inside groups and 0 B across "
    "groups; slowest rank 1 computes {slow} ms (+96% over the mean), fastest rank 0 "
    "0.90 ms"
)


def test_compute_and_stragglers_come_from_a_jobs_step_summaries(tmp_path):
    """--from-summary: the median of the summaries' mean compute and of the slowest rank's
    lateness; given figures win; a log without summaries is refused with what to do."""
    log = tmp_path / "job.log"
    log.write_text(
        "\n".join(
            ["[0] something else"]
            + [
                SUMMARY.format(first=5 * i + 1, last=5 * i + 5, mean=mean, slow=slow)
                for i, (mean, slow) in enumerate([(50.0, 99.0), (52.0, 101.0), (80.0, 100.0)])
            ]
        )
    )
    out = tmp_path / "plan.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.plan",
            "--model",
            "resnet18_v1",
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
            "--from-summary",
            str(log),
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    plan = json.loads(out.read_text())
    assert plan["compute_seconds"] == pytest.approx(0.052)
    assert plan["arguments"]["straggler_ms"] == pytest.approx(49.0)  # median of 49, 49, 20
    given = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.plan",
            "--model",
            "resnet18_v1",
            "--from-summary",
            str(log),
            "--compute-ms",
            "7",
            "--json",
            str(out),
        ],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert given.returncode == 0 and json.loads(out.read_text())["compute_seconds"] == 0.007
    log.write_text("[0] no summaries here\n")
    refused = subprocess.run(
        [sys.executable, "-m", "mxkv_hybrid.plan", "--from-summary", str(log)],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "MXKV_SUMMARY_EVERY=k" in refused.stderr


def test_the_command_prints_a_table_and_a_recommendation(tmp_path):
    sizes = tmp_path / "model.json"
    sizes.write_text(json.dumps([[64, 3, 3, 3], [1000, 2048], 1000]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.plan",
            "--model",
            str(sizes),
            "--hosts",
            "4",
            "--ranks-per-host",
            "2",
            "--compute-ms",
            "20",
            "--json",
            str(tmp_path / "plan.json"),
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "allreduce, hierarchical" in done.stdout and "recommended: " in done.stdout
    predictions = json.loads((tmp_path / "plan.json").read_text())["predictions"]
    assert len(predictions) == 2 + 2 + 4 + 2  # allreduce x2, sync, async, easgd x4, lasgd x2
    cluster = Cluster(4, 2, Link(2e-6, 100e9 / 8), Link(20e-6, 25e9 / 8))  # the defaults
    expected = Planner(Workload(array_bytes(str(sizes)), 0.02), cluster).predictions()
    assert [p["step_seconds"] for p in predictions] == pytest.approx(
        [r.step_seconds for r in expected]
    )


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--hosts", "2"], "give the compute time of one batch"),
        (
            ["--model", "no_such_net", "--compute-ms", "5"],
            "neither a file nor a Gluon model-zoo name",
        ),
        (
            ["--compute-ms", "5", "--straggler-ms", "1", "--drift-ms", "2"],
            "--drift-ms 2 is a part of --straggler-ms (1): give a value from 0 to it",
        ),
    ],
)
def test_bad_input_is_refused_with_what_to_do(arguments, message):
    done = subprocess.run(
        [sys.executable, "-m", "mxkv_hybrid.plan", *arguments],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and message in done.stderr


def test_measure_times_the_model_here():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.plan",
            "--model",
            "resnet18_v1",
            "--measure",
            "--batch",
            "2",
            "--image-size",
            "32",
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if line.startswith("resnet18_v1:"))
    compute = float(header.split("compute ")[1].split(" ms")[0])
    assert compute > 0 and "measuring resnet18_v1: 4/4" in done.stderr

"""mxkv-launch on real jobs: host lists and host files reach mpiexec (here: localhost),
--check reports on the installation and the topology, and two ranks never share a line."""

import re

import pytest

from support.jobs import launch


@pytest.mark.parametrize("how", ["hosts", "hostfile"])
def test_host_lists_reach_mpiexec(tmp_path, how):
    if how == "hosts":
        options = ["-H", "localhost:3"]
    else:
        (tmp_path / "hosts").write_text("localhost:3\n")
        options = ["--hostfile", str(tmp_path / "hosts")]
    job = launch(3, "average.py", launcher_options=options)
    assert job.returncode == 0, job.output
    for rank in range(3):
        assert f"RESULT Hybrid rank={rank} of 3 value=[2.0, 2.0, 2.0]" in job.lines_of(rank), (
            job.output
        )


def check_report(job) -> dict:
    """{field: [lines]} of rank 0's self-check report."""
    report = {}
    for line in job.lines_of(0):
        if line.startswith("  ") and ":" in line:
            field, text = line.strip().split(":", 1)
            report.setdefault(field, []).append(text.strip())
    return report


@pytest.mark.parametrize(
    "ranks, env, options, expected",
    [
        (2, {}, (), {"mode": "allreduce", "groups": "none (mode allreduce"}),
        (
            4,
            {"MXKV_MODE": "sync"},
            ("--servers", "1", "--group-size", "2"),
            {
                "mode": "sync",
                "groups": "2 group(s), 2 ranks each; leaders (talk to the servers): ranks [0, 2]",
                "servers": "1 server(s) answered",
            },
        ),
    ],
)
def test_check_reports_the_topology_and_correct_sums(ranks, env, options, expected):
    job = launch(ranks, None, env=env, launcher_options=(*options, "--check"), timeout=60)
    assert job.returncode == 0, job.output
    report = check_report(job)
    assert f"{ranks} rank(s) on 1 host(s)" in report["MPI"][0], job.output
    for field, start in expected.items():
        assert report[field][0].startswith(start), (field, report[field])
    assert [line.split(":")[1].split(",")[0].strip() for line in report["pushpull"]] == [
        "correct on every rank"
    ] * 2, report["pushpull"]
    assert report["result"][0].startswith("OK"), job.output


def test_lines_of_two_ranks_never_share_a_line(tmp_path):
    """MXNet's C++ log writes each piece of a line separately; under mxkv-launch every one
    of its lines still reaches the output whole, behind its own rank's prefix."""
    lines = 30
    job = launch(2, "mxnet_log_lines.py", str(tmp_path), str(lines))
    assert job.returncode == 0, job.output
    for rank in range(2):
        said = job.lines_of(rank)
        mxnet_lines = [line for line in said if "ImageRecordIOParser2" in line]
        assert len(mxnet_lines) == lines, job.output
        for line in mxnet_lines:
            assert re.fullmatch(
                r"\[[\d:]+\] \S+iter_image_recordio_2\.cc:\d+: "
                r"ImageRecordIOParser2: "
                rf"\S+rank{rank}\.rec, use 1 threads for decoding\.\.",
                line,
            ), line
        assert [line for line in said if line.startswith("python line")] == [
            f"python line {i}" for i in range(lines)
        ], job.output

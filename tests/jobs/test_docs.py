"""The documentation site built by Sphinx with warnings as errors, as a real process: every
knob and flag on its generated page, `{result}` references rendered from their file; a broken
link, or a result that cannot be read, fails the build."""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mxkv_hybrid.config import KNOBS
from mxkv_hybrid.launch.launcher import build_parser

from support.paths import DOCS
from support.results_sample import RESULTS_SAMPLE

BUILD_TIMEOUT = 300


def sphinx_build(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(source),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    done = sphinx_build(DOCS, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    knobs_page = (tmp_path / "reference" / "knobs.html").read_text()
    missing = [name for name in KNOBS if name not in knobs_page]
    assert not missing, missing
    commands_page = (tmp_path / "reference" / "commands.html").read_text()
    flags = [
        flag
        for action in build_parser()._actions
        for flag in action.option_strings
        if not isinstance(action, argparse._HelpAction)
    ]
    assert [flag for flag in flags if flag not in commands_page] == []
    errors_page = (tmp_path / "troubleshooting.html").read_text()
    assert "the known MXKV_* knobs are {', '.join(KNOBS)}" in errors_page


def test_a_broken_link_fails_the_build(tmp_path):
    """The control of the build above: the same configuration, one page, one dead link."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(DOCS / "conf.py", source)
    shutil.copytree(DOCS / "_ext", source / "_ext")
    (source / "index.md").write_text(
        "# Index\n\nSee [a page](no-such-page.md) and [a heading](#no-such-heading).\n"
    )
    done = sphinx_build(source, tmp_path / "out")
    assert done.returncode != 0
    assert "no-such-page" in done.stderr and "no-such-heading" in done.stderr


def results_site(tmp_path: Path, page: str) -> Path:
    """A one-page site with the docs' configuration and a results file of its own (the role
    reads examples/benchmarks/results/ two folders above _ext/)."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(DOCS / "conf.py", source)
    shutil.copytree(DOCS / "_ext", source / "_ext")
    results = tmp_path / "examples" / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "run.json").write_text(json.dumps(RESULTS_SAMPLE))
    (source / "index.md").write_text(f"# Index\n\n{page}\n")
    return source


def test_a_result_renders_from_its_file(tmp_path):
    page = (
        "Pushpull {result}`run.json:rows[method=hybrid,link_mbps=50].median_s|ms:.1f` ms, "
        "{result}`run.json:rows.0.median_s/rows.1.median_s|.2fx` faster; "
        '{result}`run.json:"a.b c".fraction|.1%` of {result}`run.json:"a.b c".tests` tests.\n\n'
        "| ms |\n|---|\n| {result}`run.json:rows.2.median_s\\|ms:.0f` |"
    )
    done = sphinx_build(results_site(tmp_path, page), tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "out" / "index.html").read_text()
    assert "Pushpull 22.3 ms, 2.16x faster; 7.3% of 764 tests." in html
    assert "<td><p>500</p></td>" in html


@pytest.mark.parametrize(
    ("reference", "problem"),
    [
        ("none.json:rows.0.median_s", "no results file none.json"),
        ("run.json:rows.0.seconds", "rows.0 has no key 'seconds'"),
        ("run.json:rows.3.median_s", "rows has 3 elements, no index 3"),
        ("run.json:rows[method=hybrid].median_s", "2 elements of rows match [method=hybrid]"),
        ('run.json:"a.b c".label|.1f', '"a.b c".label is "x", not a number'),
        ('run.json:"a.b c".never', "not a number"),
        ("run.json:rows.0.median_s|.1q", "Unknown format code 'q'"),
    ],
)
def test_a_result_that_cannot_be_read_fails_the_build(tmp_path, reference, problem):
    done = sphinx_build(results_site(tmp_path, f"It took {{result}}`{reference}`."), tmp_path / "o")
    assert done.returncode != 0
    assert f"index.md:3: ERROR: {{result}}`{reference}`: " in done.stderr, done.stderr
    assert problem in done.stderr

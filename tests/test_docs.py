"""The documentation site: built by Sphinx with warnings as errors (a broken link or
reference fails), its knob and flag pages generated from the code."""

import argparse
import importlib
import json
import shutil
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import List

import pytest

from mxkv_hybrid.capabilities import CAPABILITIES, MODES, ModeCapabilities
from mxkv_hybrid.config import KNOBS
from mxkv_hybrid.launch.launcher import build_parser

DOCS = Path(__file__).parent.parent / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
from docs_lint import markdown_pages, page_findings, rendered_text_findings  # noqa: E402
from error_catalogue import catalogue, messages_of  # noqa: E402
from generated_reference import (  # noqa: E402
    capability_table,
    client_matrix_table,
    fault_matrix_table,
    flag_tables,
    knob_table,
)
from results_role import ResultError, figure  # noqa: E402

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


def test_a_new_knob_appears_on_the_generated_page():
    knobs = dict(KNOBS)
    knobs["MXKV_NEW_KNOB"] = replace(KNOBS["MXKV_TAU"], default="7", doc="a knob | with a bar")
    page, before = knob_table(knobs), knob_table(KNOBS)
    assert "| `MXKV_NEW_KNOB` | `7` | a knob \\| with a bar |" in page
    assert "MXKV_NEW_KNOB" not in before
    del knobs["MXKV_TAU"]
    assert "| `MXKV_TAU` |" not in knob_table(knobs)


def test_the_knobs_mxkv_launch_sets_have_their_own_table():
    internal = [name for name, knob in KNOBS.items() if knob.internal]
    assert "MXKV_GROUP_JOB" in internal
    users, launchers = knob_table(KNOBS), knob_table(KNOBS, internal=True)
    assert all(f"| `{name}` |" in launchers and f"| `{name}` |" not in users for name in internal)
    assert "| `MXKV_MODE` |" in users and "| `MXKV_MODE` |" not in launchers


def test_every_capability_is_a_row_and_every_mode_a_column():
    table = capability_table(CAPABILITIES).splitlines()
    columns = " | ".join(f"`{mode}`" for mode in MODES)
    assert table[0] == f"| capability | {columns} | what it means |"
    names = [field.name for field in fields(ModeCapabilities)]
    assert [row.split(" | ")[0] for row in table[2:]] == [f"| `{name}`" for name in names]
    servers = next(row for row in table if row.startswith("| `servers` |")).split(" | ")[1:-1]
    assert servers == ["yes" if CAPABILITIES[m].servers else "—" for m in MODES]


def test_every_cell_of_the_fault_matrix_is_a_row_of_its_page():
    from fault_matrix import CELLS, FAULTS, PATHS

    first = CELLS[0]
    measured = {(first.fault, first.path, first.mode, first.moment): {"named_after_s": 0.25}}
    table = fault_matrix_table(CELLS, FAULTS, PATHS, measured).splitlines()
    assert len(table) == 2 + len(CELLS)
    for row, cell in zip(table[2:], CELLS):
        assert row.startswith(
            f"| {FAULTS[cell.fault][0]} | {PATHS[cell.path][0]} | `{cell.mode}` |"
        )
        assert f"| {cell.outcome} | {cell.status} |" in row
    assert table[2].endswith("| 0.2 | — |") and table[3].endswith("| — | — |")
    added = replace(CELLS[0], fault="kill-relay", outcome="a new outcome")
    assert "a new outcome" in fault_matrix_table([*CELLS, added], FAULTS, PATHS)


def test_a_new_flag_appears_on_the_generated_page():
    parser = build_parser()
    before = flag_tables(parser)
    parser.add_argument("--brand-new", type=int, default=3, help="a flag")
    page = flag_tables(parser)
    assert "--brand-new" not in before
    assert "| `--brand-new BRAND_NEW` | a flag (default: `3`) |" in page


def test_flag_help_expands_defaults():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="table.json", help="where (default: %(default)s)")
    assert "where (default: table.json)" in flag_tables(parser)


def test_the_error_catalogue_reads_every_kind_of_message():
    source = (
        "def f(parser, mode):\n"
        "    if mode:\n"
        "        raise ConfigError(f'MXKV_MODE={mode} is wrong: ' 'unset it')\n"
        "    parser.error('--servers needs ' + mode)\n"
        "    raise ValueError('expected 1/0')\n"
        "    raise RuntimeError(message)\n"
    )
    found = [(m.raised_as, m.text) for m in messages_of(source, "m")]
    assert found == [
        ("ConfigError", "MXKV_MODE={mode} is wrong: unset it"),
        ("usage error (exit 2)", "--servers needs {mode}"),
        ("ValueError", "expected 1/0"),
    ]


def test_the_error_catalogue_holds_the_package_messages():
    texts = [m.text for m in catalogue()]
    assert any(text.startswith("unknown setting {") for text in texts)
    assert any("--restarts must not be negative" in text for text in texts)
    assert not any(m.module.startswith("mxkv_hybrid.testing") for m in catalogue())


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


RESULTS_SAMPLE = {
    "rows": [
        {"method": "mpi", "link_mbps": 50.0, "median_s": 0.048127},
        {"method": "hybrid", "link_mbps": 50.0, "median_s": 0.022316},
        {"method": "hybrid", "link_mbps": 0.0, "median_s": 0.5},
    ],
    "a.b c": {"fraction": 0.0734, "tests": 764, "label": "x", "never": float("nan")},
}


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
        ('run.json:"a.b c".label', '"a.b c".label is "x", not a number'),
        ('run.json:"a.b c".never', "not a number"),
        ("run.json:rows.0.median_s|.1q", "Unknown format code 'q'"),
    ],
)
def test_a_result_that_cannot_be_read_fails_the_build(tmp_path, reference, problem):
    done = sphinx_build(results_site(tmp_path, f"It took {{result}}`{reference}`."), tmp_path / "o")
    assert done.returncode != 0
    assert f"index.md:3: ERROR: {{result}}`{reference}`: " in done.stderr, done.stderr
    assert problem in done.stderr


def test_result_references_read_keys_indices_selectors_and_ratios(tmp_path, monkeypatch):
    monkeypatch.setattr("results_role.RESULTS", tmp_path)
    (tmp_path / "r.json").write_text(json.dumps(RESULTS_SAMPLE))
    assert figure("r.json:rows[method=mpi].median_s|us:.0f") == "48127"
    assert figure('r.json:rows[method="hybrid", link_mbps=0].median_s') == "0.5"
    assert figure("r.json:rows.-1.median_s/rows.0.median_s|.1fx") == "10.4x"
    assert figure('r.json:"a.b c".tests|,.1f') == "764.0"
    for bad in ["r.json", "r.json:rows..median_s", "r.json:rows[method=mpi", "r.json:a/b/c"]:
        with pytest.raises(ResultError):
            figure(bad)


@pytest.mark.parametrize(
    "page",
    sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "_build" not in p.parts),
)
def test_every_page_has_one_title(page):
    lines = (DOCS / page).read_text().splitlines()
    fence = False
    titles = []
    for line in lines:
        fence ^= line.startswith("```")
        if not fence and line.startswith("# "):
            titles.append(line)
    assert len(titles) == 1, titles


@pytest.mark.parametrize("page", [p.relative_to(DOCS.parent).as_posix() for p in markdown_pages()])
def test_every_page_passes_the_docs_lint(page):
    found = page_findings(DOCS.parent / page)
    assert not found, "\n".join(map(str, found))


def test_the_text_the_generated_tables_take_from_the_code_passes_the_docs_lint():
    """Knob documentation, capabilities, flag help, the tests' tables and every error
    message render on the site: no pointer that points nowhere, no issue number."""
    import client_matrix
    import fault_matrix
    import trainer_rules_table

    parsers = ["mxkv_hybrid.launch.launcher", "mxkv_hybrid.plan.__main__", "mxkv_hybrid.tune"]
    texts = {
        "config.KNOBS": knob_table(KNOBS) + "\n" + knob_table(KNOBS, internal=True),
        "capabilities.CAPABILITIES": capability_table(CAPABILITIES),
        **{
            parser: flag_tables(importlib.import_module(parser).build_parser())
            for parser in parsers
        },
        "tests/fault_matrix.py": fault_matrix_table(
            fault_matrix.CELLS, fault_matrix.FAULTS, fault_matrix.PATHS
        ),
        "tests/client_matrix.py": client_matrix_table(client_matrix),
        "tests/trainer_rules_table.py": "\n".join(
            why for _, why in trainer_rules_table.DIFFERENCES.values()
        ),
        "the error catalogue": "\n".join(f"{m.module}: {m.text}" for m in catalogue()),
    }
    found = [
        finding
        for source, text in texts.items()
        for finding in rendered_text_findings(text, source)
    ]
    assert not found, "\n".join(map(str, found))


def lint_sample(tmp_path: Path, text: str, name: str = "page.md") -> List[str]:
    page = tmp_path / name
    page.write_text(text)
    return [str(finding) for finding in page_findings(page, tmp_path)]


def test_the_lint_finds_a_stray_code_fence(tmp_path):
    """A fence left over before a list turns the list and the next code block into one code
    block; the block's closing fence then opens one that swallows the rest."""
    fixed = "# Page\n\nText.\n\n- one\n- two\n\n```python\nx = 1\n```\n"
    stray = fixed.replace("Text.\n\n", "Text.\n\n```\n")
    assert lint_sample(tmp_path, fixed) == []
    found = lint_sample(tmp_path, stray)
    assert len(found) == 2
    assert found[0].startswith("page.md:9: the code block opened at line 5 meets a fence with")
    assert found[1] == "page.md:11: an odd number of code fences (3)"
    unclosed = lint_sample(tmp_path, "# Page\n\n```python\nx = 1\n")
    assert unclosed == [
        "page.md:3: this code fence (```python) is never closed",
        "page.md:3: an odd number of code fences (1)",
    ]


def test_the_lint_finds_above_and_below_that_point_nowhere(tmp_path):
    bad = (
        "# Page\n\n## Part\n\n"
        "As described above, it works.\n"
        "The run (Part, above) took long.\n"
        "The table below lists them.\n\nMore text.\n\n| a |\n|---|\n| 1 |\n"
    )
    assert [line.split(": ")[0] for line in lint_sample(tmp_path, bad)] == [
        "page.md:5",
        "page.md:6",
        "page.md:7",
    ]
    good = (
        "# Page\n\n## Part\n\n"
        "See [Part](#part), above. Accuracy above 0.25, below `MXKV_X`, below the bound.\n"
        "The table below lists them:\n\n| a |\n|---|\n| 1 |\n\n"
        "```\nthe command above\n```\n"
    )
    assert lint_sample(tmp_path, good) == []
    assert len(rendered_text_findings("1 MiB measured best here (below).", "a knob")) == 1


def test_the_lint_finds_issue_and_stop_numbers(tmp_path):
    found = lint_sample(tmp_path, "# Page\n\nShort of the aim of issue 33; stop 53's run.\n")
    assert found == [
        "page.md:3: 'issue 33': say what it is instead",
        "page.md:3: 'stop 53': say what it is instead",
    ]
    assert lint_sample(tmp_path, "# Page\n\nShort of the relay's design aim.\n") == []
    assert len(rendered_text_findings("as quoted in Issue 17", "a knob")) == 1


def test_the_lint_finds_a_generated_table_that_does_not_say_so(tmp_path):
    directive = "```{mxkv-knobs}\n```\n"
    bare = f"# Knobs\n\nEvery knob.\n\n{directive}"
    assert lint_sample(tmp_path, bare) == [
        "page.md:5: say 'generated when the site is built' before this generated table"
    ]
    said = f"# Knobs\n\nEvery knob. The table is generated when the\nsite is built.\n\n{directive}"
    assert lint_sample(tmp_path, said) == []
    said_before_another_heading = said + f"\n## More\n\n{directive}"
    assert len(lint_sample(tmp_path, said_before_another_heading)) == 1


def test_the_lint_finds_links_to_missing_pages_and_headings(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A part (`--flag X`)\n")
    bad = "# Page\n\n[a](missing.md), [b](#nowhere), [c](other.md#a-part)\n"
    assert lint_sample(tmp_path, bad) == [
        "page.md:3: missing.md: no such page",
        "page.md:3: #nowhere: no such heading",
        "page.md:3: other.md#a-part: no such heading",
    ]
    good = "# Page\n\n[a](other.md), [b](#page), [c](other.md#a-part---flag-x)\n"
    assert lint_sample(tmp_path, good) == []

"""The documentation site's parts, in one process: the knob, flag, capability and
fault-matrix tables generated from the code, the error catalogue, `{result}` references, and
the docs lint (every page passes it; what it finds)."""

import argparse
import importlib
import json
from dataclasses import fields, replace
from pathlib import Path
from typing import List

import pytest
from error_catalogue import catalogue, messages_of
from generated_reference import (
    capability_table,
    client_matrix_table,
    fault_matrix_table,
    flag_tables,
    knob_table,
)
from results_role import ResultError, figure

from mxkv_hybrid.capabilities import CAPABILITIES, MODES, ModeCapabilities
from mxkv_hybrid.config import KNOBS
from mxkv_hybrid.launch.launcher import build_parser

from support.docs_lint import markdown_pages, page_findings, rendered_text_findings
from support.paths import DOCS
from support.results_sample import RESULTS_SAMPLE


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
    from tables.fault_matrix import CELLS, FAULTS, PATHS

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


def test_result_references_read_keys_indices_selectors_and_ratios(tmp_path, monkeypatch):
    monkeypatch.setattr("results_role.RESULTS", tmp_path)
    (tmp_path / "r.json").write_text(json.dumps(RESULTS_SAMPLE))
    assert figure("r.json:rows[method=mpi].median_s|us:.0f") == "48127"
    assert figure('r.json:rows[method="hybrid", link_mbps=0].median_s') == "0.5"
    assert figure("r.json:rows.-1.median_s/rows.0.median_s|.1fx") == "10.4x"
    assert figure('r.json:"a.b c".tests|,.1f') == "764.0"
    assert figure("r.json:rows[method=mpi].method") == "mpi"  # a recorded name, as it stands
    for bad in [
        "r.json",
        "r.json:rows..median_s",
        "r.json:rows[method=mpi",
        "r.json:a/b/c",
        "r.json:rows[method=mpi].method|.1f",  # a name has no format
        "r.json:rows[method=mpi].method/rows.0.median_s",  # nor a ratio
    ]:
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


def test_the_text_the_generated_tables_take_from_the_code_passes_the_docs_lint():
    """Knob documentation, capabilities, flag help, the tests' tables and every error
    message render on the site: no pointer that points nowhere, no issue number."""
    from tables import client_matrix, fault_matrix, trainer_rules

    parsers = ["mxkv_hybrid.launch.launcher", "mxkv_hybrid.plan.__main__", "mxkv_hybrid.tune"]
    texts = {
        "config.KNOBS": knob_table(KNOBS) + "\n" + knob_table(KNOBS, internal=True),
        "capabilities.CAPABILITIES": capability_table(CAPABILITIES),
        **{
            parser: flag_tables(importlib.import_module(parser).build_parser())
            for parser in parsers
        },
        "tests/tables/fault_matrix.py": fault_matrix_table(
            fault_matrix.CELLS, fault_matrix.FAULTS, fault_matrix.PATHS
        ),
        "tests/tables/client_matrix.py": client_matrix_table(client_matrix),
        "tests/tables/trainer_rules.py": "\n".join(
            why for _, why in trainer_rules.DIFFERENCES.values()
        ),
        "the error catalogue": "\n".join(f"{m.module}: {m.text}" for m in catalogue()),
    }
    found = [
        finding
        for source, text in texts.items()
        for finding in rendered_text_findings(text, source)
    ]
    assert not found, "\n".join(map(str, found))

"""The README is the front door: short, its commands those of CI, its example a real file,
its links alive, its measured figures those of the results files."""

import re
from typing import List

from results_role import ResultError, figure

from support.paths import ROOT

README = (ROOT / "README.md").read_text()
MOST_LINES = 300  # the README points into docs/, it does not hold them

# GitHub shows the README raw, so it cannot use the site's {result} role: a measured figure
# is typed and followed at once by `<!-- result: FILE:PATH|FORMAT -->` (the role's
# reference), and the typed text must be what the role would render.
MARKER = re.compile(r"<!-- result: (.+?) -->")
MARKED = re.compile(r"[\d.,]+x?%?<!-- result: .+? -->")
# What reads as a measurement: a number with a unit of time, a ratio, a percentage or a
# rate ("22.3 ms", "2.16x", "1211 s", "50 Mbit/s", "20 minutes"), or with decimals ("0.958";
# not a version such as 1.9.1).
MEASURED = re.compile(
    r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?:x|\s?(?:ms|s|%|[MG]B/s|Mbit/s|minutes))(?![\w/])"
    r"|(?<![\w.])\d+\.\d+(?!\.?\d|\w)"
)

# Figures of the README that are no measurement, each with why.
NOT_MEASURED = {
    "50 Mbit/s": "the emulated link's rate between the groups: a setting of the study",
    "4.0": "CC BY 4.0, the licence of the digits data",
}


def prose(text: str) -> str:
    """`text` with its fenced code blocks blanked (line numbers kept) and code spans removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        lines.append("" if fenced or line.startswith("```") else re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def wrong_figures(text: str) -> List[str]:
    """Each marked figure whose typed text is not its results file's value in its format."""
    text, found = prose(text), []
    for marker in MARKER.finditer(text):
        where = f"README.md:{line_of(text, marker.start())}: {marker.group(1)}"
        try:
            value = figure(marker.group(1))
        except ResultError as error:
            found.append(f"{where}: {error}")
            continue
        before = text[: marker.start()]
        if not re.search(rf"(?<![\d.]){re.escape(value)}$", before):
            typed = re.search(r"[\d.,]*x?%?$", before).group(0)  # always matches
            found.append(f"{where}: typed {typed!r}, the file says {value!r}")
    return found


def unmarked_figures(text: str) -> List[str]:
    """Each figure that reads as a measurement with no marker and not in NOT_MEASURED."""
    text = MARKED.sub("FIGURE", prose(text))
    return [
        f"README.md:{line_of(text, match.start())}: {match.group(0)!r}"
        for match in MEASURED.finditer(text)
        if match.group(0) not in NOT_MEASURED
    ]


def test_ci_runs_the_readme_test_command():
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```bash\n{command}\n```" in README
    assert f"```bash\n{command}\n```" in (ROOT / "docs" / "getting-started.md").read_text()


def test_readme_is_short():
    assert len(README.splitlines()) <= MOST_LINES


def test_the_readme_example_is_examples_quickstart():
    example = (ROOT / "examples" / "quickstart.py").read_text()
    assert f"```python\n{example}```" in README


def test_every_link_of_the_readme_reaches_a_file():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert targets
    missing = [
        target
        for target in targets
        if not target.startswith("http") and not (ROOT / target).exists()
    ]
    assert not missing, missing


def test_every_marked_figure_of_the_readme_is_its_results_file():
    assert MARKER.search(README)
    found = wrong_figures(README)
    assert not found, "\n".join(found)


def test_every_measured_figure_of_the_readme_is_marked():
    found = unmarked_figures(README)
    assert not found, "\n".join(found)


def test_the_figure_checks_find_a_typed_figure():
    reference = "allreduce.json:settings.cpus"
    assert wrong_figures(f"on 2<!-- result: {reference} --> cores") == []
    assert len(wrong_figures(f"on 3<!-- result: {reference} --> cores")) == 1
    assert len(wrong_figures(f"on 12<!-- result: {reference} --> cores")) == 1
    assert len(wrong_figures("on 2<!-- result: allreduce.json:no.such.key --> cores")) == 1
    typed = "took 22.3 ms, 2.16x, 0.958, 10 s, 7%, 20 minutes; `1.5 ms` and 50 Mbit/s"
    assert [f.split(": ")[1] for f in unmarked_figures(typed)] == [
        "'22.3 ms'",
        "'2.16x'",
        "'0.958'",
        "'10 s'",
        "'7%'",
        "'20 minutes'",
    ]
    assert unmarked_figures("MXNet 1.9.1, 4 machines x 8 GPUs, 8x8 digits, 57 KB") == []

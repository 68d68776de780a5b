"""Checks of the Markdown pages (README.md and docs/) that the Sphinx build does not make:
code fences that close, "above" and "below" that say where, no internal issue or stop
numbers, a sentence before every generated table saying that it is generated (a reader of
the Markdown file sees nothing there), and links whose page and heading exist as GitHub
shows them."""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Set, Tuple

from support.paths import ROOT

GENERATED_NOTE = "generated when the site is built"

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(.*?)\s*$")
CODE_SPAN = re.compile(r"(`+)[^`]*?\1")
LINK = re.compile(r"\]\(|\{(?:ref|doc)\}`")
# "above"/"below" that points: after a verb of showing ("see above", "as above", "listed
# below"), or ending its phrase (before punctuation or the line's end: "the table above;",
# "(below)"), or before a conjunction ("the run above and"). Comparisons take an object
# ("above 0.25", "below the bound", "below CODE") and are left alone.
POINTER = re.compile(
    r"\b(?:see|as|shown|described|listed|explained|given|documented|defined|mentioned"
    r"|measured|discussed)\s+(?:above|below)\b"
    r"|\b(?:above|below)(?=\s*(?:[.,;:()!?]|$))"
    r"|\b(?:above|below)(?=\s+(?:and|or|after|shows|gives|says|lists)\b)",
    re.IGNORECASE,
)

BLOCK_START = re.compile(r"^\s*(?:\||`{3,}|~{3,}|:{3,}|[-*+] |\d+[.)] )")
BLOCK_NAMES = {
    "table": {"table", "tables", "figures", "results"},
    "code": {"command", "commands", "output", "example", "code", "lines", "line", "script"},
    "list": {"list", "steps", "cases", "rules"},
}
INTERNAL_NUMBER = re.compile(r"\b(?:issue|stop)s? #?\d+", re.IGNORECASE)
GENERATED_DIRECTIVE = re.compile(r"^\s*(?:`{3,}|:{3,})\{mxkv-[a-z-]+\}")
HEADING = re.compile(r"^#{1,6} ")
LINK_TARGET = re.compile(r"\]\(([^)\s#]*\.md|)(?:#([^)\s]+))?\)")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


def markdown_pages(root: Path = ROOT) -> List[Path]:
    """README.md and every page of docs/ (not a build under docs/_build)."""
    pages = sorted(p for p in (root / "docs").rglob("*.md") if "_build" not in p.parts)
    return [root / "README.md", *pages]


def _fence_scan(lines: List[str]) -> Tuple[List[bool], List[Tuple[int, str]]]:
    """Whether each line is a fence or inside a fenced block, and the fence problems by line
    number (CommonMark's rule: a fence closes on the same character, at least as long, with
    no info string)."""
    in_code: List[bool] = []
    problems: List[Tuple[int, str]] = []
    start, fence, info = 0, "", ""  # the open block's first line and fence; "": none open
    for number, line in enumerate(lines, start=1):
        match = FENCE.match(line)
        in_code.append(bool(fence) or match is not None)
        if match is None:
            continue
        marks, tag = match.groups()
        if not fence:
            start, fence, info = number, marks, tag
        elif marks[0] == fence[0] and len(marks) >= len(fence):
            if not tag:
                fence = ""
                continue
            problem = (
                f"the code block opened at line {start} meets a fence with a language tag "
                f"({marks}{tag}), which does not close it: a fence is missing before it"
            )
            problems.append((number, problem))
    if fence:
        problems.append((start, f"this code fence ({fence}{info}) is never closed"))
    return in_code, problems


def fence_findings(text: str, path: str) -> List[Finding]:
    """Fences that do not pair: an odd count of fence lines, a block closed by a fence with a
    language tag (which opens nothing: the block goes on), a block never closed."""
    lines = text.splitlines()
    found = [Finding(path, number, problem) for number, problem in _fence_scan(lines)[1]]
    fences = [number for number, line in enumerate(lines, start=1) if FENCE.match(line)]
    if len(fences) % 2:
        found.append(Finding(path, fences[-1], f"an odd number of code fences ({len(fences)})"))
    return found


def _prose(lines: List[str]) -> List[Tuple[int, str]]:
    """The lines outside code blocks, by number, their code spans replaced by `CODE`."""
    in_code = _fence_scan(lines)[0]
    return [
        (number, CODE_SPAN.sub("CODE", line))
        for number, (line, code) in enumerate(zip(lines, in_code), start=1)
        if not code
    ]


def _block_after(lines: List[str], number: int) -> str:
    """What starts right after the paragraph holding line `number` (from 1): "table",
    "code", "list", or "" (more text, or the end of the file)."""
    index = number
    while index < len(lines) and lines[index].strip() and not BLOCK_START.match(lines[index]):
        index += 1  # the paragraph goes on
    while index < len(lines) and not lines[index].strip():
        index += 1
    following = lines[index].lstrip() if index < len(lines) else ""
    if following.startswith("|"):
        return "table"
    if following.startswith(("```", "~~~", ":::")):
        return "code"
    return "list" if BLOCK_START.match(following) else ""


def _introduces(line: str, block: str) -> bool:
    """Whether a line's 'below' names the block that follows its paragraph: it ends with
    'below:', or says 'the table below' before a table, 'the output below' before code, ..."""
    if not block:
        return False
    if re.search(r"\bbelow\s*:\s*$", line, re.IGNORECASE):
        return True
    named = {m.lower() for m in re.findall(r"\b(\w+)\s+below\b", line, re.IGNORECASE)}
    return bool(named & BLOCK_NAMES[block])


def pointer_findings(text: str, path: str) -> List[Finding]:
    """'above' or 'below' as a pointer on a line with no link; 'below' may introduce the table,
    code block or list that follows its paragraph ('the table below', 'as below:')."""
    lines = text.splitlines()
    found = []
    for number, line in _prose(lines):
        pointers = [m.group(0) for m in POINTER.finditer(line)]
        if not pointers or LINK.search(line):
            continue
        below_only = all(p.lower().endswith("below") for p in pointers)
        if below_only and _introduces(line, _block_after(lines, number)):
            continue
        found.append(
            Finding(path, number, f"'{pointers[0]}' points nowhere: link the section meant")
        )
    return found


def number_findings(text: str, path: str) -> List[Finding]:
    """Issue and stop numbers: the project's own bookkeeping, meaningless to a reader."""
    return [
        Finding(path, number, f"'{match.group(0)}': say what it is instead")
        for number, line in enumerate(text.splitlines(), start=1)
        for match in INTERNAL_NUMBER.finditer(line)
    ]


def generated_note_findings(text: str, path: str) -> List[Finding]:
    """A generated table ({mxkv-...} directive) with no sentence saying that it is generated
    when the site is built, in its section before it."""
    found = []
    section: List[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if GENERATED_DIRECTIVE.match(line):
            if GENERATED_NOTE not in " ".join(" ".join(section).split()).lower():
                found.append(
                    Finding(path, number, f"say '{GENERATED_NOTE}' before this generated table")
                )
            section = []
        elif HEADING.match(line):
            section = []
        else:
            section.append(line)
    return found


def heading_anchors(text: str) -> Set[str]:
    """The anchors of a page's headings, as GitHub and MyST (`myst_heading_anchors`) make
    them."""
    from myst_parser.slugs import github_slugify

    lines = text.splitlines()
    headings = [lines[number - 1] for number, _ in _prose(lines)]
    return {
        github_slugify(heading.lstrip("#").strip().replace("`", ""))
        for heading in headings
        if HEADING.match(heading)
    }


def link_findings(page: Path, path: str) -> List[Finding]:
    """Links to a Markdown page (or a heading of one, `page.md#anchor`, `#anchor`) whose page
    or heading does not exist, with GitHub's anchors: a reader of the Markdown files follows
    those (MyST makes the same ones; Sphinx also takes docutils' ids, which GitHub does not
    know, and never sees README.md)."""
    lines = page.read_text().splitlines()
    found = []
    for number, line in _prose(lines):
        for target, anchor in LINK_TARGET.findall(line):
            linked = (page.parent / target).resolve() if target else page
            if not linked.exists():
                found.append(Finding(path, number, f"{target}: no such page"))
            elif anchor and anchor not in heading_anchors(linked.read_text()):
                found.append(Finding(path, number, f"{target}#{anchor}: no such heading"))
    return found


def page_findings(page: Path, root: Path = ROOT) -> List[Finding]:
    """Every check of a Markdown page, its findings named by the path from `root`."""
    text, path = page.read_text(), page.relative_to(root).as_posix()
    return [
        *fence_findings(text, path),
        *pointer_findings(text, path),
        *number_findings(text, path),
        *generated_note_findings(text, path),
        *link_findings(page, path),
    ]


def rendered_text_findings(text: str, source: str) -> List[Finding]:
    """The checks that apply to text the code holds and the site renders (a knob's
    documentation, a flag's help, an error message)."""
    return [*pointer_findings(text, source), *number_findings(text, source)]

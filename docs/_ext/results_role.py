"""The ``{result}`` role: a measured figure rendered from its results file, never typed.

``{result}`FILE:PATH|FORMAT``` reads ``examples/benchmarks/results/FILE`` (JSON) and writes
the number at PATH in FORMAT, or the text at PATH as it stands (a name the run recorded,
such as the algorithm `auto` chose; no FORMAT, no ratio). A missing file, a missing key or
a value that is neither is a build error naming the file and the path.

PATH is steps joined by ``.``: a key of an object; an integer, which indexes a list; a
``"quoted key"`` (for a key holding ``.``, ``/``, ``|`` or ``[``: everything up to the
next double quote, which a key cannot hold); ``[field=value,...]``, the one element of a
list whose fields have those values (a value in double quotes is a string; a bare one
matches the same string or, where it reads as JSON, that value: ``50`` matches ``50``,
``50.0`` and ``"50"``, ``null`` matches ``null``). A selector may follow a key directly:
``rows[method=mpi,ranks=2].median_s``. ``PATH/PATH`` is the ratio of two values of the file.

FORMAT is ``[SCALE:]SPEC[x]``: SCALE multiplies the value first (``ms`` and ``us`` turn
seconds into milliseconds and microseconds; ``KB``, ``MB``, ``GB``, ``KiB``, ``MiB``,
``GiB`` turn bytes into those), SPEC is a Python format specification (``.1f``; ``.1%``
writes a fraction as a percentage) and a trailing ``x`` writes a ratio as ``2.16x``. With
no FORMAT the value is written with ``g``. In a Markdown table write the ``|`` as ``\\|``.

Examples: ``{result}`training_step.json:results[configuration=sync].total_ms|.1f```
writes that configuration's total_ms with one decimal; ``{result}`allreduce.json:
rows[workload=resnet50,method=hybrid,ranks=2].median_s|ms:.1f``` (one line) writes the
median in milliseconds; ``{result}`allreduce.json:rows[workload=1024,method=auto,ranks=2]
.algorithm``` writes the algorithm's name."""

import json
from functools import lru_cache
from math import isnan
from pathlib import Path
from typing import Any, List, Tuple

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxRole

RESULTS = Path(__file__).resolve().parents[2] / "examples" / "benchmarks" / "results"
SCALES = {
    "ms": 1e3,
    "us": 1e6,
    "KB": 1e-3,
    "MB": 1e-6,
    "GB": 1e-9,
    "KiB": 2.0**-10,
    "MiB": 2.0**-20,
    "GiB": 2.0**-30,
}


class ResultError(ValueError):
    """A figure that cannot be rendered from its file."""


def split(text: str, separator: str) -> List[str]:
    """`text` split at `separator` outside double quotes and square brackets."""
    parts, current, quoted, depth = [], "", False, 0
    for char in text:
        if char == separator and not quoted and depth == 0:
            parts.append(current)
            current = ""
            continue
        if char == '"':
            quoted = not quoted
        elif not quoted and char in "[]":
            depth += 1 if char == "[" else -1
        current += char
    if quoted or depth:
        raise ResultError(f"unbalanced quote or bracket in {text!r}")
    return [*parts, current]


def unquote(text: str) -> Tuple[str, bool]:
    """A key or value without its double quotes, and whether it had them."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1], True
    return text, False


def selector_values(text: str) -> List[Any]:
    """What a selector's value matches: a quoted string; else the text as a string and, where
    it reads as JSON, that value (``2`` matches ``2``, ``2.0`` and ``"2"``)."""
    value, quoted = unquote(text.strip())
    if quoted:
        return [value]
    try:
        return [value, json.loads(value)]
    except ValueError:
        return [value]


def select(items: Any, selector: str, where: str) -> Any:
    """The one element of the list `items` whose fields match `selector` (``a=1,b=x``)."""
    if not isinstance(items, list):
        raise ResultError(f"{where} is not a list, so [{selector}] selects nothing")
    wanted = []
    for condition in split(selector, ","):
        field, equals, value = condition.partition("=")
        if not equals:
            raise ResultError(f"[{selector}]: {condition!r} is not field=value")
        wanted.append((unquote(field.strip())[0], selector_values(value)))
    found = [
        item
        for item in items
        if isinstance(item, dict)
        and all(field in item and item[field] in values for field, values in wanted)
    ]
    if len(found) != 1:
        raise ResultError(f"{len(found)} elements of {where} match [{selector}], not 1")
    return found[0]


def step(value: Any, key: str, where: str) -> Any:
    """`value`'s member `key`: a list's index (an integer) or an object's key."""
    name, quoted = unquote(key)
    if isinstance(value, list) and not quoted and name.lstrip("-").isdigit():
        if not -len(value) <= int(name) < len(value):
            raise ResultError(f"{where} has {len(value)} elements, no index {name}")
        return value[int(name)]
    if not isinstance(value, dict):
        raise ResultError(f"{where} is not an object, so it has no key {name!r}")
    if name not in value:
        raise ResultError(f"{where} has no key {name!r} (its keys: {', '.join(value)})")
    return value[name]


def parse_step(part: str) -> Tuple[str, List[str]]:
    """A step's key ("" for none, quotes kept) and the texts of its selectors."""
    if part.startswith('"'):
        end = part.find('"', 1) + 1
    else:
        end = part.find("[") if "[" in part else len(part)
    head, rest, selectors = part[:end], part[end:], []
    while rest:
        inside = split(rest[1:], "]") if rest.startswith("[") else []
        if len(inside) < 2:
            raise ResultError(f"{part!r}: after the key, only [field=value,...] selectors")
        selectors.append(inside[0])
        rest = "]".join(inside[1:])
    if not head and not selectors:
        raise ResultError("an empty step")
    return head, selectors


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted `path` (see the module's documentation) of `data`."""
    value, where = data, ""
    for part in split(path, "."):
        head, selectors = parse_step(part)
        if head:
            value = step(value, head, where or "the file")
            where = f"{where}.{head}" if where else head
        for selector in selectors:
            value = select(value, selector, where or "the file")
            where += f"[{selector}]"
    return value


@lru_cache(maxsize=None)
def load(path: Path) -> Any:
    """The parsed results file at `path`."""
    if not path.is_file():
        raise ResultError(f"no results file {path.name} in examples/benchmarks/results/")
    return json.loads(path.read_text())


def number(data: Any, path: str) -> float:
    """The number at `path`, or the ratio of two (``PATH/PATH``)."""
    terms = split(path, "/")
    if len(terms) > 2:
        raise ResultError(f"{path!r}: one '/' at most (a ratio of two values)")
    values = [lookup(data, term.strip()) for term in terms]
    for term, value in zip(terms, values):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or isnan(value):
            raise ResultError(f"{term.strip()} is {json.dumps(value)[:60]}, not a number")
    if len(values) == 2 and values[1] == 0:
        raise ResultError(f"{terms[1].strip()} is 0, the ratio has no value")
    return values[0] / values[1] if len(values) == 2 else values[0]


def formatted(value: float, form: str) -> str:
    """`value` written in FORMAT `form` (``[SCALE:]SPEC[x]``)."""
    scale, colon, spec = form.rpartition(":")
    if colon:
        if scale not in SCALES:
            raise ResultError(f"unknown scale {scale!r} (known: {', '.join(SCALES)})")
        value *= SCALES[scale]
    ratio = spec.endswith("x")
    try:
        text = format(value, spec[:-1] if ratio else spec or "g")
    except ValueError as error:
        raise ResultError(f"format {form!r}: {error}") from None
    return text + "x" if ratio else text


def figure(reference: str) -> str:
    """The text of ``FILE:PATH|FORMAT``, read from its results file."""
    name, colon, rest = reference.partition(":")
    if not colon:
        raise ResultError("write FILE:PATH, e.g. allreduce.json:settings.cpus")
    parts = split(rest, "|")
    if len(parts) > 2:
        raise ResultError("one '|' at most, before the format")
    data = load(RESULTS / name.strip())
    path, form = parts[0].strip(), (parts[1:] or [""])[0].strip()
    if not form and len(split(path, "/")) == 1:
        value = lookup(data, path)
        if isinstance(value, str):
            return value
    return formatted(number(data, path), form)


class ResultRole(SphinxRole):
    """``{result}`FILE:PATH|FORMAT```: the figure as text; a build error if it cannot be read."""

    def run(self) -> Tuple[List[nodes.Node], List[nodes.system_message]]:
        # a changed file re-renders the page; a missing one, every build until it exists
        self.env.note_dependency(str(RESULTS / self.text.partition(":")[0].strip()))
        try:
            text = figure(self.text)
        except ResultError as error:
            message = self.inliner.reporter.error(
                f"{{result}}`{self.text}`: {error}", line=self.lineno
            )
            return [self.inliner.problematic(self.rawtext, self.rawtext, message)], [message]
        return [nodes.Text(text)], []


def setup(app: Sphinx) -> dict:
    app.add_role("result", ResultRole())
    return {"parallel_read_safe": True, "parallel_write_safe": True}

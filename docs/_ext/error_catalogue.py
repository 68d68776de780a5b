"""The ``{mxkv-errors}`` directive: every error message the package can raise, read from its
source (``raise SomeError("...")`` and ``parser.error("...")``), grouped by module, with
placeholders where the message fills in values. Generated, so no message is left out."""

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from generated_reference import MarkdownDirective, cell
from sphinx.application import Sphinx

PACKAGE = Path(__file__).resolve().parents[2] / "mxkv_hybrid"


@dataclass(frozen=True)
class ErrorMessage:
    module: str  # dotted, e.g. mxkv_hybrid.config
    raised_as: str  # the exception's name, or "usage error (exit 2)" for parser.error
    text: str  # the message, `{expression}` where a value is filled in


def _message_text(node: ast.expr) -> Optional[str]:
    """The message of a string, f-string or concatenation of them; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message_text(node.left), _message_text(node.right)
        if left is None and right is None:
            return None
        return (left or "{" + ast.unparse(node.left) + "}") + (
            right or "{" + ast.unparse(node.right) + "}"
        )
    return None


def _raised(node: ast.AST) -> Optional[ast.Call]:
    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
        return node.exc
    return None


def messages_of(source: str, module: str) -> List[ErrorMessage]:
    """Every message raised, or passed to an argparse parser's error(), in `source`."""
    found = []
    nodes = sorted(
        (node for node in ast.walk(ast.parse(source)) if hasattr(node, "lineno")),
        key=lambda node: (node.lineno, node.col_offset),
    )
    for node in nodes:
        call, raised_as = _raised(node), None
        if call is not None and isinstance(call.func, ast.Name):
            raised_as = call.func.id
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "error"
            and ast.unparse(node.func.value) == "parser"
        ):
            call, raised_as = node, "usage error (exit 2)"
        if call is None or raised_as is None or not call.args:
            continue
        text = _message_text(call.args[0])
        if text:
            found.append(ErrorMessage(module, raised_as, " ".join(text.split())))
    return found


def catalogue(package: Path = PACKAGE) -> List[ErrorMessage]:
    """The messages of every module a user runs (not mxkv_hybrid.testing, the tests' own)."""
    messages = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "testing":
            continue
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        messages += messages_of(path.read_text(), module)
    return messages


def _literal(text: str) -> str:
    """Markdown that shows `text` as written: emphasis and link characters escaped outside
    its `code` spans."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        for character in "\\*_[]<>$":
            parts[index] = parts[index].replace(character, "\\" + character)
    return "`".join(parts) if len(parts) % 2 else text.replace("`", "'")


def catalogue_markdown(messages: List[ErrorMessage]) -> str:
    rows = ["| where | raised as | the message (values in braces) |", "|---|---|---|"]
    rows += [f"| `{m.module}` | `{m.raised_as}` | {cell(_literal(m.text))} |" for m in messages]
    return "\n".join(rows)


class ErrorsDirective(MarkdownDirective):
    def markdown(self) -> str:
        return catalogue_markdown(catalogue())


def setup(app: Sphinx) -> dict:
    app.add_directive("mxkv-errors", ErrorsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

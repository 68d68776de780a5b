"""Sphinx configuration of the mxkv_hybrid documentation (built with -W by
tests/jobs/test_docs.py)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]

project = "mxkv_hybrid"
author = "the mxkv_hybrid developers"
copyright = "2026, the mxkv_hybrid developers"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "generated_reference",  # _ext/: the knob, flag and capability tables, from the code
    "error_catalogue",  # _ext/: every error message, from the package's source
    "results_role",  # _ext/: {result}`FILE:PATH`, each measured figure from its results file
]
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
smartquotes = False  # messages and commands are shown as typed
default_role = "code"  # `x` in docstrings reads as code, as in the Markdown pages

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_mock_imports: list = []

html_theme = "furo"
html_title = "mxkv_hybrid"

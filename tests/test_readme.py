"""The README is the front door: short, its commands those of CI, its example a real file,
its links alive."""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
MOST_LINES = 300  # the README points into docs/, it does not hold them


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

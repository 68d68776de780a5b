"""The README tells the truth about the knobs and the CI command."""
from pathlib import Path

from mxkv_hybrid.config import KNOBS

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def test_every_knob_is_documented_with_its_default():
    for name, knob in KNOBS.items():
        assert f"| `{name}` | `{knob.default}` |" in README, name


def test_ci_runs_the_readme_test_command():
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```bash\n{command}\n```" in README

"""The README's main job: the digits example learns, and its replicas stay identical."""
import re
import subprocess
import sys
from pathlib import Path

from conftest import JOB_TIMEOUT

EXAMPLE = Path(__file__).parent.parent / "examples" / "train_digits.py"


def test_digits_example_learns_on_two_ranks():
    done = subprocess.run([sys.executable, "-m", "mxkv_hybrid.launch", "-n", "2", "--timeout",
                           str(JOB_TIMEOUT), "--", "python", str(EXAMPLE), "--epochs", "8"],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT + 30)
    assert done.returncode == 0, done.stdout + done.stderr
    final = re.search(r"\[0\] final test accuracy ([0-9.]+) .* identical on all ranks: (\w+)",
                      done.stdout)
    assert final, done.stdout
    assert float(final.group(1)) > 0.9 and final.group(2) == "True", final.group(0)

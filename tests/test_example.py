"""The README's main job, and the same real network trained in every mode: the digits
CNN reaches the target accuracy and, after mxkv_hybrid.consensus, every rank holds the
same model."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import JOB_TIMEOUT

EXAMPLE = Path(__file__).parent.parent / "examples" / "train_digits.py"
TWO_GROUPS = ["--group-size", "1", "--servers", "1"]


def train_digits(mode: str, launcher_options, *example_options: str) -> str:
    """Runs the example on 2 ranks; returns rank 0's final line."""
    done = subprocess.run([sys.executable, "-m", "mxkv_hybrid.launch", "-n", "2", "--timeout",
                           str(JOB_TIMEOUT), *launcher_options, "--", "python", str(EXAMPLE),
                           "--epochs", "8", *example_options],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT + 30,
                          env=dict(os.environ, MXKV_MODE=mode))
    assert done.returncode == 0, done.stdout + done.stderr
    final = re.search(r"\[0\] final test accuracy ([0-9.]+) .* identical on (all ranks|the "
                      r"ranks of this group job): (\w+)", done.stdout)
    assert final, done.stdout
    assert f"(MXKV_MODE={mode})" in done.stdout
    return final


@pytest.mark.parametrize("mode, launcher_options, example_options", [
    ("allreduce", [], []),
    ("sync", TWO_GROUPS, []),
    # separate group jobs: the example compares the ranks of each job (through mpi4py);
    # test_group_jobs checks through files that the groups end on the same model
    ("async", TWO_GROUPS, ["--lr", "0.02"]),  # 2 groups' stale momentum updates: lr / 5
    ("easgd", TWO_GROUPS + ["--one-job"], []),
    ("lasgd", [], []),
])
def test_digits_example_learns_in_every_mode(mode, launcher_options, example_options):
    final = train_digits(mode, launcher_options, *example_options)
    assert float(final.group(1)) > 0.9 and final.group(3) == "True", final.group(0)

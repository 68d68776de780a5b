"""The README's example (examples/quickstart.py) runs on 2 ranks and finds the line it fits.
It is the README's promise that the example works; that the ranks' gradients really cross
is tested where the data are split so a rank alone cannot pass (tests/test_example.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import JOB_TIMEOUT

EXAMPLE = Path(__file__).parent.parent / "examples" / "quickstart.py"


@pytest.mark.parametrize("mode", ["allreduce", "lasgd"])
def test_the_quickstart_fits_the_line_on_every_rank(mode):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            "2",
            "--timeout",
            str(JOB_TIMEOUT),
            "--",
            "python",
            str(EXAMPLE),
        ],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT + 30,
        env=dict(os.environ, MXKV_MODE=mode),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.findall(
        r"rank (\d) of 2: weight \[\[ ?(\S+) +(\S+)\]\], bias \[(\S+)\]", done.stdout
    )
    assert sorted(rank for rank, *_ in found) == ["0", "1"], done.stdout
    for _, w0, w1, bias in found:
        assert (float(w0), float(w1), float(bias)) == pytest.approx((3, -2, 1), abs=1e-3)

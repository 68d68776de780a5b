"""The README's example (examples/quickstart.py) runs on 2 ranks and finds the line it fits.
It is the README's promise that the example works; that the ranks' gradients really cross
is tested where the data are split so a rank alone cannot pass (tests/jobs/test_example.py)."""

import re

import pytest

from support.jobs import launch
from support.paths import EXAMPLES


@pytest.mark.parametrize("mode", ["allreduce", "lasgd"])
def test_the_quickstart_fits_the_line_on_every_rank(mode):
    # an absolute script path: start_job's workers/ folder does not apply
    job = launch(2, str(EXAMPLES / "quickstart.py"), env={"MXKV_MODE": mode})
    assert job.returncode == 0, job.output
    found = re.findall(r"rank (\d) of 2: weight \[\[ ?(\S+) +(\S+)\]\], bias \[(\S+)\]", job.output)
    assert sorted(rank for rank, *_ in found) == ["0", "1"], job.output
    for _, w0, w1, bias in found:
        assert (float(w0), float(w1), float(bias)) == pytest.approx((3, -2, 1), abs=1e-3)

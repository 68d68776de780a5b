"""train_convex.py's loss and its control: the exchange between groups must learn what
neither half of the features learns alone."""

import re
from typing import Dict

import pytest

from support.references import run_reference


def convex_loss(output: str, kind: str = "group-final") -> float:
    """train_convex.py's first `kind` loss ('group-final' or 'consensus') in `output`, over
    its zero-weight loss."""
    scale = re.search(r"zero-weight loss ([0-9.]+)", output)
    found = re.search(rf"{kind} loss ([0-9.e-]+)", output)
    assert scale and found, output
    return float(found.group(1)) / float(scale.group(1))


CONVEX_STEPS = 200  # train_convex.py's steps in the tests of the exchange

# A loss of r times the zero-weight loss (0.5 |w*|^2 over the whole data set, whose
# features are independent with unit variance) is a weight error |w - w*| of sqrt(r) |w*|:
# this bound says the model learned every weight to within 3 % (the data's noise floor is
# 7e-6; a half alone, the control, stays above 0.4).
CONVEX_LEARNED = 1e-3


@pytest.fixture(scope="session")
def convex_halves_alone(tmp_path_factory) -> Dict[int, float]:
    """The control of train_convex.py --halves: for each half of the features, one process
    with no exchange trained CONVEX_STEPS on that half; its loss on the whole data set (the
    other half's weights as initialised) over the zero-weight loss."""
    return {
        half: convex_loss(
            run_reference(
                "train_convex.py",
                str(tmp_path_factory.mktemp(f"half{half}")),
                str(CONVEX_STEPS),
                "--alone",
                str(half),
            )
        )
        for half in (0, 1)
    }

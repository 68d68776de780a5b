"""The client matrix (tests/tables/client_matrix.py) on one host: each client, unmodified,
trains the tiny ImageNet in every mode where it applies with 2 ranks (the checks:
tests/support/client_checks.py)."""

import pytest

from support.client_checks import assert_trained_together, knobs
from support.warm_ranks import launch_in
from tables.client_matrix import LAYOUT, cells


@pytest.mark.parametrize("matrix_client, mode", cells(), ids=[f"{c.name}-{m}" for c, m in cells()])
def test_a_client_trains_in_a_mode(warm_ranks, tiny_imagenet, tmp_path, matrix_client, mode):
    script, *args = matrix_client.command(str(tiny_imagenet), str(tmp_path))
    job = launch_in(warm_ranks, 2, script, *args, env=knobs(mode), launcher_options=LAYOUT[mode])
    assert_trained_together(matrix_client, mode, job, tmp_path)

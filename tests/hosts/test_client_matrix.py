"""The client matrix (tests/tables/client_matrix.py) across 2 emulated hosts: one client
per mode, with the relays on (the checks: tests/support/client_checks.py)."""

import pytest

from support.client_checks import assert_trained_together, knobs
from support.emulated import launch_on, on_emulated_hosts
from tables.client_matrix import ACROSS_HOSTS, LAYOUT, client


@pytest.mark.parametrize("mode", [pytest.param(m, marks=on_emulated_hosts) for m in ACROSS_HOSTS])
def test_a_client_trains_in_a_mode_across_hosts(make_cluster, tiny_imagenet, tmp_path, mode):
    matrix_client = client(ACROSS_HOSTS[mode])
    cluster = make_cluster(2, rate_mbit=1000)
    job = launch_on(
        cluster,
        "h1",
        ["-n", "2", "-H", "h1:1,h2:1", *LAYOUT[mode]],
        matrix_client.command(str(tiny_imagenet), str(tmp_path)),
        env=knobs(mode),
    )
    assert_trained_together(matrix_client, mode, job, tmp_path)

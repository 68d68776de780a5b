"""The emulated slow link between groups: its arithmetic and its knobs (no timing)."""

import os
import secrets

import pytest

from mxkv_hybrid.comm.link_throttle import LinkThrottle, link_throttle
from mxkv_hybrid.config import Config
from mxkv_hybrid.errors import ConfigError


def test_a_transfer_takes_latency_plus_bytes_over_bandwidth():
    link = LinkThrottle(megabits_per_second=8, latency_seconds=0.002)
    assert link.seconds_for(1_000_000) == pytest.approx(1.002)
    assert link.seconds_for(0) == pytest.approx(0.002)


def test_throttle_knobs():
    assert link_throttle(Config.from_environment({})) is None
    configured = link_throttle(
        Config.from_environment({"MXKV_THROTTLE_MBPS": "50", "MXKV_THROTTLE_LATENCY_MS": "2"})
    )
    assert configured == LinkThrottle(50.0, 0.002)
    with pytest.raises(
        ConfigError, match="MXKV_THROTTLE_MBPS='-1' is invalid: expected a number >= 0"
    ):
        Config.from_environment({"MXKV_THROTTLE_MBPS": "-1"})


def shared_link_clock(name: str):
    from mpi4py import MPI  # noqa: F401  (loads libmpi.so for _C)

    from mxkv_hybrid.comm import _C

    return _C.SharedLinkClock(name), _C.TensorCollectives.unlink_shared_link


def test_a_groups_ranks_queue_on_one_link_each_direction_apart():
    """Two ranks of a group (two openings of one segment) send 1 s each at t=10: the
    second's ends at 12, as on one network card; receiving is the other direction, free;
    a transfer after the link went idle starts when it is asked for."""
    name = f"/mxkv-link-test-{secrets.token_hex(4)}"
    first, unlink = shared_link_clock(name)
    second, _ = shared_link_clock(name)
    unlink(name)
    assert not os.path.exists(f"/dev/shm{name}")  # the open ones keep their mapping
    assert first.reserve(0, 10.0, 1.0) == pytest.approx(11.0)
    assert second.reserve(0, 10.0, 1.0) == pytest.approx(12.0)
    assert second.reserve(1, 10.0, 0.5) == pytest.approx(10.5)
    assert first.reserve(0, 20.0, 0.25) == pytest.approx(20.25)

"""The emulated slow link between groups: its arithmetic and its knobs (no timing)."""
import pytest

from mxkv_hybrid.config import Config
from mxkv_hybrid.errors import ConfigError
from mxkv_hybrid.comm.link_throttle import LinkThrottle, link_throttle


def test_a_transfer_takes_latency_plus_bytes_over_bandwidth():
    link = LinkThrottle(megabits_per_second=8, latency_seconds=0.002)
    assert link.seconds_for(1_000_000) == pytest.approx(1.002)
    assert link.seconds_for(0) == pytest.approx(0.002)


def test_throttle_knobs():
    assert link_throttle(Config.from_environment({})) is None
    configured = link_throttle(Config.from_environment(
        {"MXKV_THROTTLE_MBPS": "50", "MXKV_THROTTLE_LATENCY_MS": "2"}))
    assert configured == LinkThrottle(50.0, 0.002)
    with pytest.raises(ConfigError, match="MXKV_THROTTLE_MBPS='-1' is invalid: expected a number >= 0"):
        Config.from_environment({"MXKV_THROTTLE_MBPS": "-1"})

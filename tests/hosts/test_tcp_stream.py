"""The benchmarks' TCP payload limit (examples/benchmarks/tcp_stream.py): the share of a
shaped link's rate a TCP stream can carry, from the frames' headers, and one stream
measured through an emulated host's link, which tbf lets exceed that share only by the
buckets it starts with full."""

import sys

import pytest

from mxkv_hybrid.testing.cluster import BURST_BYTES, MTU

from support.emulated import on_emulated_hosts
from support.paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES / "benchmarks"))
import tcp_stream

pytestmark = on_emulated_hosts

RATE_MBIT = 100
MEGABYTES = 20


def test_the_payload_share_is_the_frames_payload_over_their_length():
    assert MTU == 1500
    assert tcp_stream.payload_mbps(1000) == pytest.approx(1000 * 1448 / 1514)


def test_one_stream_carries_no_more_than_the_payload_share(make_cluster):
    cluster = make_cluster(2, rate_mbit=RATE_MBIT)
    measured = tcp_stream.measure(cluster, megabytes=MEGABYTES)
    # the clock starts after the first read, of at most one chunk
    timed_bytes = (MEGABYTES * 10**6 // tcp_stream.CHUNK - 1) * tcp_stream.CHUNK
    # two buckets in series (h1's egress, h2's ingress), each full at the start
    bound = tcp_stream.payload_mbps(RATE_MBIT) * (1 + 2 * BURST_BYTES / timed_bytes)
    assert 0 < measured <= bound

"""The launcher's link (launch/control/link.py, keeper.py) on loopback, in one process: its
address form, meeting notice, a caller without the token answered nothing, strangers refused
with one line, and the groups it gave up, as the finish line reads them."""

import socket
import time

import pytest

from mxkv_hybrid.launch.control.channel import receive, send
from mxkv_hybrid.launch.control.keeper import (
    JobAddress,
    ask_launcher,
    groups_given_up,
    tell_launcher_met,
)
from mxkv_hybrid.launch.control.link import LinkServer
from mxkv_hybrid.launch.control.timing import BEAT_SECONDS
from mxkv_hybrid.ps.finish_line import reason_to_go_on


def wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_job_address_is_token_at_host_colon_port():
    assert JobAddress.parse("ab12@198.18.0.11:4000") == JobAddress("ab12", "198.18.0.11", 4000)
    assert JobAddress.parse("ab12@198.18.0.11:4000").where == "198.18.0.11:4000"


@pytest.mark.parametrize(
    "address", ["198.18.0.11:4000", "ab12@198.18.0.11", "ab12@:4000", "ab12@198.18.0.11:port"]
)
def test_a_malformed_job_address_names_the_form(address):
    with pytest.raises(ValueError, match="expected TOKEN@HOST:PORT"):
        JobAddress.parse(address)


def test_a_leader_that_met_the_others_is_heard_once_the_token_matches():
    link = LinkServer("127.0.0.1")
    try:
        job = JobAddress.parse(link.address)
        tell_launcher_met(f"wrong@{job.where}")
        time.sleep(0.5)
        assert not link.met()  # a stranger's notice counts for nothing
        tell_launcher_met(link.address)
        assert wait_until(link.met)
        link.forget_meeting()
        assert not link.met()
        assert ask_launcher(link.address) == {}
        assert ask_launcher(f"wrong@{job.where}", timeout=1.0) is None
    finally:
        link.close()


def test_an_ask_that_waits_before_it_speaks_reads_the_answer_not_a_heartbeat():
    """The link beats to ranks' links only: an asker that has not spoken by the next beat
    still reads the answer first (a beat read instead made ask_launcher say None)."""
    link = LinkServer("127.0.0.1")
    try:
        job = JobAddress.parse(link.address)
        with socket.create_connection((job.host, job.port), timeout=5) as connection:
            time.sleep(3 * BEAT_SECONDS)  # the link beats meanwhile
            send(connection, {"token": job.token, "ask": "ranks"})
            assert receive(connection.makefile("rb")) == {"ranks": {}, "given_up": []}
    finally:
        link.close()


def test_the_finish_line_goes_on_once_every_unfinished_group_is_given_up_or_quiet():
    assert reason_to_go_on([1, 2], [2], quiet=1.0, timeout=15) is None  # 1 may still come
    assert reason_to_go_on([1, 2], None, quiet=1.0, timeout=15) is None  # not asked this time
    assert (
        reason_to_go_on([1, 2], [0, 1, 2], quiet=1.0, timeout=15)
        == "were given up by the launcher (lost, no restart left)"
    )
    assert (
        reason_to_go_on([1], [], quiet=15.5, timeout=15)
        == "neither finished nor made progress for 15 s (MXKV_PS_TIMEOUT)"
    )


def test_strangers_are_refused_with_one_line_and_the_link_keeps_serving(capfd):
    """What a port scanner or a stranger sends to the link: JSON that is not a message (it
    once stopped the link's thread), a line without end, another job's token. Each is
    closed, the first host named once; the link still answers its job."""
    link = LinkServer("127.0.0.1")
    try:
        job = JobAddress.parse(link.address)
        for stray in (b"5\n", b"x" * 200_000, b'{"token": "wrong", "rank": 0}\n'):
            with socket.create_connection((job.host, job.port), timeout=5) as conn:
                conn.sendall(stray)
                conn.settimeout(5)
                heard = b""
                while True:  # closed within seconds (its beats, "{}", are all it hears)
                    try:
                        data = conn.recv(1 << 16)
                    except ConnectionResetError:  # closed with the stray unread
                        break
                    if not data:
                        break
                    heard += data
                assert set(heard.split()) <= {b"{}"}, heard
        tell_launcher_met(link.address)
        assert wait_until(link.met)
        assert ask_launcher(link.address) == {}
    finally:
        link.close()
    refused = [line for line in capfd.readouterr().err.splitlines() if "refused" in line]
    assert refused == [
        (
            "mxkv-launch: refused a connection to the launcher's link from "
            "127.0.0.1: not a message of the control channel (its host's next ones are "
            "closed without a word)"
        )
    ], refused


def test_the_groups_a_launcher_gave_up_are_told_to_callers_with_its_token():
    link = LinkServer("127.0.0.1")
    try:
        assert groups_given_up(link.address) == []
        link.give_up(2)
        link.give_up(0)
        assert groups_given_up(link.address) == [0, 2]
        job = JobAddress.parse(link.address)
        assert groups_given_up(f"wrong@{job.where}") == []  # answered nothing
        assert groups_given_up("") == []  # a rank not started by mxkv-launch
    finally:
        link.close()

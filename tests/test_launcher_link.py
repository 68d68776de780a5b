"""The launcher's link (comm/launcher_link.py) on loopback: its address form, the groups'
meeting notice, and a caller without the token answered nothing."""
import time

import pytest

from mxkv_hybrid.comm.launcher_link import JobAddress, LinkServer, ask_launcher, \
    tell_launcher_met


def wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_job_address_is_token_at_host_colon_port():
    assert JobAddress.parse("ab12@198.18.0.11:4000") == JobAddress("ab12", "198.18.0.11", 4000)
    assert JobAddress.parse("ab12@198.18.0.11:4000").where == "198.18.0.11:4000"


@pytest.mark.parametrize("address", ["198.18.0.11:4000", "ab12@198.18.0.11", "ab12@:4000",
                                     "ab12@198.18.0.11:port"])
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

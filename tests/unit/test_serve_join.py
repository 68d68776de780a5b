"""The rendezvous of mxkv-launch --serve / --join (launch/rendezvous.py) on loopback, in one
process: a group waiting for the others is refused once the serving launcher falls silent,
and the serving launcher grants ps-lite's one rejoin to whichever group asks."""

import threading
import time

import pytest

from mxkv_hybrid.launch import rendezvous
from mxkv_hybrid.launch.control import timing


def test_a_group_waiting_for_the_others_knows_when_the_serving_launcher_falls_silent(monkeypatch):
    """A joined group waits for its assignment while the others join: the serving launcher
    beats meanwhile, so a wait longer than the silence allowed goes on; when it stops (a
    rendezvous that is not gathering here: its host cut off, as seen on emulated hosts),
    the group is refused naming the silence instead of waiting for ever."""
    monkeypatch.setattr(timing, "HELLO_SECONDS", 0.5)
    monkeypatch.setattr(timing, "BEAT_SECONDS", 0.2)
    silent = rendezvous.Rendezvous(2, "easgd", {}, "127.0.0.1", lost_seconds=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(
            rendezvous.JoinRefused,
            match=r"was silent for 1 s while this group "
            r"waited for the others to join",
        ):
            rendezvous.join(silent.address, 2, "easgd", timeout=5, lost_seconds=0.5)
        assert time.monotonic() - started < 5
    finally:
        silent.close()
    gathering = rendezvous.Rendezvous(2, "easgd", {}, "127.0.0.1", lost_seconds=0.5)
    threading.Thread(target=gathering.gather, daemon=True).start()
    joined = []
    try:
        first = threading.Thread(
            target=lambda: joined.append(
                rendezvous.join(gathering.address, 2, "easgd", timeout=5, lost_seconds=0.5)
            )
        )
        first.start()
        time.sleep(3)  # three times the silence allowed, beaten through
        joined.append(rendezvous.join(gathering.address, 1, "easgd", timeout=5, lost_seconds=0.5))
        first.join(timeout=10)
        assert sorted(j.assignment["group"] for j in joined) == [0, 1], joined
    finally:
        for j in joined:
            j.report(0)
        gathering.close()


def test_the_serving_launcher_grants_one_rejoin_whichever_group_asks(monkeypatch):
    """ps-lite's scheduler takes one rejoining node in its life: two joined groups, each
    restarted once by its own launcher, would abort it. The serving launcher, which started
    it, grants the one rejoin; the second group's launcher is told why not. Its servers
    started again (a regrouped job) come with a fresh grant."""
    monkeypatch.setattr(timing, "BEAT_SECONDS", 0.2)
    serving = rendezvous.Rendezvous(2, "easgd", {}, "127.0.0.1", lost_seconds=5)
    gathering = threading.Thread(target=serving.gather, daemon=True)
    gathering.start()
    joined: list = []
    joining = [
        threading.Thread(
            target=lambda: joined.append(
                rendezvous.join(serving.address, 1, "easgd", timeout=5, lost_seconds=5)
            )
        )
        for _ in range(2)
    ]
    for thread in joining:
        thread.start()
    for thread in joining + [gathering]:
        thread.join(timeout=10)
    stop = threading.Event()

    def listen_until_stopped() -> None:
        while not stop.is_set():
            serving.listen(0.1)

    def listening() -> threading.Thread:
        stop.clear()
        thread = threading.Thread(target=listen_until_stopped, daemon=True)
        thread.start()
        return thread

    listener = listening()
    try:
        first, second = sorted(joined, key=lambda j: j.assignment["group"])
        assert first.ask_to_rejoin("group 0 (ranks 0-0)") is None
        refused = second.ask_to_rejoin("group 1 (ranks 1-1)")
        assert refused is not None
        assert refused.startswith("group 0 (1 rank(s), joined from 127.0.0.1) rejoined the servers")
        assert "ps-lite's scheduler takes one rejoining node in its life" in refused
        assert first.ask_to_rejoin("group 0 (ranks 0-0)") is not None  # nor twice the same
        stop.set()
        listener.join(timeout=5)
        serving.regroup({})  # the job started again on fresh servers: a fresh grant
        listener = listening()
        assert second.ask_to_rejoin("group 1 (ranks 1-1)") is None
    finally:
        stop.set()
        for j in joined:
            j.report(0)
        listener.join(timeout=5)  # out of accept() before the listener's socket closes
        serving.close()

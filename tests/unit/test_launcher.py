"""mxkv-launch refuses --server-hosts when ranks run on other hosts behind relays, before it
starts anything, naming both ways out; with --trusted-network it takes them."""

import pytest

from mxkv_hybrid.launch.launcher import parse_arguments


@pytest.mark.parametrize("trusted", [False, True])
def test_server_hosts_behind_relays_are_refused_with_the_way_out(monkeypatch, capsys, trusted):
    """--server-hosts with ranks on another host: the relays cannot place servers there,
    so the launcher refuses before starting anything and names both fixes; with
    --trusted-network (no relays) it is taken (control)."""
    monkeypatch.setenv("MXKV_MODE", "sync")
    options = ["-n", "4", "-H", "127.0.0.1:2,198.18.255.2:2", "--servers", "1"]
    options += ["--server-hosts", "198.18.255.2"] + (["--trusted-network"] if trusted else [])
    if trusted:
        assert parse_arguments([*options, "--", "python", "x.py"]).server_hosts
        return
    with pytest.raises(SystemExit):
        parse_arguments([*options, "--", "python", "x.py"])
    error = capsys.readouterr().err
    assert "--server-hosts with ranks on other hosts" in error
    assert "drop --server-hosts" in error and "--trusted-network" in error

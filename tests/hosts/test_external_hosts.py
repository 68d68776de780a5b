"""The benchmarks' --cluster external (examples/benchmarks/external_hosts.py) on hosts it
did not make: emulated ones, reached only through their ssh stand-in, as someone else's
hosts would be. A command runs on the host named, with the variables a job reads and no
others, and each host's address is what the host resolves."""

import subprocess
import sys

import pytest

from support.emulated import on_emulated_hosts
from support.paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES / "benchmarks"))
from external_hosts import ExternalHosts

pytestmark = on_emulated_hosts

SHOW = (
    "import os, socket; "
    "print(socket.gethostname(), os.environ.get('MXKV_MODE'), os.environ.get('NOT_A_KNOB'))"
)


def test_commands_run_on_the_named_host_with_the_job_s_variables_only(make_cluster, monkeypatch):
    cluster = make_cluster(2)
    monkeypatch.setenv("BENCH_HOSTS", "h1,h2")
    monkeypatch.setenv("BENCH_SSH", cluster.ssh)
    hosts = ExternalHosts(2, 1000)
    assert [hosts.address(name) for name in hosts.names] == [
        cluster.address("h1"),
        cluster.address("h2"),
    ]
    shown = hosts.run(
        "h2",
        [sys.executable, "-c", SHOW],
        env={"MXKV_MODE": "sync", "NOT_A_KNOB": "1"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shown.communicate(timeout=60)[0].split() == ["h2", "sync", "None"]


def test_too_few_hosts_or_no_stand_in_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("BENCH_HOSTS", "a")
    with pytest.raises(SystemExit, match="needs 2 hosts in BENCH_HOSTS"):
        ExternalHosts(2, 1000)
    monkeypatch.setenv("BENCH_HOSTS", "a,b")
    monkeypatch.setenv("BENCH_SSH", "/no/such/stand-in")
    with pytest.raises(SystemExit, match="BENCH_SSH='/no/such/stand-in' is not a command"):
        ExternalHosts(2, 1000)

"""The emulated cluster itself (mxkv_hybrid.testing.cluster): names, addresses and a shaped
link per host, cut and heal, nothing left after a crash (training across its hosts:
test_modes_across_hosts.py)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from mxkv_hybrid.testing.cluster import NETNS_ETC, STATE_DIR

from support.emulated import on_emulated_hosts

pytestmark = on_emulated_hosts

PROBE = (
    "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), "
    "timeout=2); print('reached')"
)
SINK = (
    "import socket, sys, time\n"
    "server = socket.create_server(('0.0.0.0', int(sys.argv[1])))\n"
    "print('listening', flush=True)\n"
    "connection, _ = server.accept()\n"
    "received, started = 0, None\n"
    "while True:\n"
    "    data = connection.recv(1 << 20)\n"
    "    started = started or time.monotonic()\n"
    "    if not data: break\n"
    "    received += len(data)\n"
    "print(received, time.monotonic() - started, flush=True)\n"
)


def reach(cluster, source: str, target: str, port: int) -> bool:
    done = subprocess.run(
        cluster.command(source, [sys.executable, "-c", PROBE, target, str(port)]),
        capture_output=True,
        check=False,
        text=True,
        timeout=30,
    )
    return done.stdout.strip() == "reached"


def listen(cluster, host: str, port: int) -> subprocess.Popen:
    sink = cluster.run(
        host, [sys.executable, "-c", SINK, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert sink.stdout.readline().strip() == "listening"
    return sink


def test_hosts_have_names_addresses_and_a_shaped_link(make_cluster):
    rate_mbit, megabytes = 80, 4
    cluster = make_cluster(2, rate_mbit=rate_mbit)
    h1, h2 = cluster.address("h1"), cluster.address("h2")
    assert h1.startswith("198.18.") and h2.startswith("198.18.")
    names = subprocess.run(
        cluster.command("h2", ["sh", "-c", "hostname; getent hosts h1"]),
        capture_output=True,
        check=False,
        text=True,
        timeout=30,
    ).stdout.split()
    assert names[0] == "h2" and names[1] == h1
    sink = listen(cluster, "h2", 7000)
    sent = [
        sys.executable,
        "-c",
        (
            "import socket; s = socket.create_connection(('h2', 7000)); "
            f"s.sendall(b'x' * {megabytes << 20}); s.close()"
        ),
    ]
    subprocess.run(cluster.command("h1", sent), check=True, timeout=60)
    received, seconds = sink.communicate(timeout=60)[0].split()
    assert int(received) == megabytes << 20
    # tbf lets at most its bucket (256 KiB) through at once; the rest at the rate at most
    bound = ((megabytes << 20) - (256 << 10)) * 8 / (rate_mbit * 1e6)
    assert float(seconds) >= bound, f"{received} bytes in {seconds} s: faster than the rate"
    assert cluster.bytes_sent("h1") >= megabytes << 20


def test_a_cut_host_is_unreachable_until_healed(make_cluster):
    cluster = make_cluster(2)
    sink = listen(cluster, "h2", 7001)
    cluster.cut("h2")
    assert not reach(cluster, "h1", "h2", 7001)
    cluster.heal("h2")
    # h1's neighbour entry for h2 failed while cut: it is resolved again (ARP probes a
    # second apart, 3 by default) before a SYN goes out, so allow a few tries of 2 s
    assert any(reach(cluster, "h1", "h2", 7001) for _ in range(5))
    sink.wait(timeout=30)


def test_a_cluster_whose_owner_dies_is_removed_with_its_processes():
    """The owner is SIGKILLed with a process running on a host: its guardian removes it all."""
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\nfrom mxkv_hybrid.testing.cluster import Cluster\n"
                "cluster = Cluster(2); cluster.start()\n"
                "cluster.run('h2', ['sleep', '600'])\n"
                "print(cluster.state.cluster_id, cluster.host('h2').namespace, flush=True)\n"
                "time.sleep(600)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    cluster_id, namespace = owner.stdout.readline().split()
    assert (
        namespace
        in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, check=False, text=True
        ).stdout
    )
    # `ip netns exec` enters the namespace after Popen returns: wait for it to get there
    deadline = time.monotonic() + 20
    sleeper: list = []
    while not sleeper and time.monotonic() < deadline:
        sleeper = subprocess.run(
            ["ip", "netns", "pids", namespace], capture_output=True, check=False, text=True
        ).stdout.split()
        time.sleep(0.05)
    assert sleeper, "the sleeper never appeared on h2"
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 20
    while (STATE_DIR / f"{cluster_id}.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (STATE_DIR / f"{cluster_id}.json").exists(), "the guardian did not tear down"
    assert (
        namespace
        not in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, check=False, text=True
        ).stdout
    )
    assert not (NETNS_ETC / namespace).exists()
    links = subprocess.run(
        ["ip", "-br", "link"], capture_output=True, check=False, text=True
    ).stdout
    assert f"mxb{cluster_id}" not in links and f"mxv{cluster_id}" not in links
    assert (
        not Path(f"/proc/{sleeper[0]}/cmdline").exists()
        or Path(f"/proc/{sleeper[0]}/stat").read_text().split()[2] == "Z"
    )


def test_sockets_of_one_host_see_its_own_name(make_cluster):
    cluster = make_cluster(1)
    name = subprocess.run(
        cluster.command("h1", [sys.executable, "-c", "import socket; print(socket.gethostname())"]),
        capture_output=True,
        check=False,
        text=True,
        timeout=30,
    ).stdout.strip()
    assert name == "h1" != socket.gethostname()
    assert os.path.exists(cluster.ssh)

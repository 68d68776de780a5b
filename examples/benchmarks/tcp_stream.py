"""What one TCP stream carries of an application's bytes through a host's link: the limit a
job's data can reach, beside the link's rate.

tbf counts every frame it lets through with its Ethernet, IP and TCP headers: at MTU 1500
each frame is 1514 bytes on the link (14 of Ethernet) and carries 1448 of payload (20 of IP,
20 of TCP and 12 of the timestamps option, on by default), so no TCP stream passes 95.6 %
of the rate. `measure` sends one stream from the first host to the second and times it at
the receiver, from its first byte to its last.

    python tcp_stream.py receive ADDRESS          (prints its port, then Mbit/s received)
    python tcp_stream.py send ADDRESS PORT MEGABYTES
"""

import socket
import subprocess
import sys
import time
from typing import Union

from mxkv_hybrid.testing.cluster import MTU, Cluster

from external_hosts import ExternalHosts

ETHERNET_HEADER = 14
IP_TCP_HEADERS = 20 + 20 + 12  # IPv4, TCP, and TCP's timestamps option
CHUNK = 4 << 20


def payload_mbps(rate_mbit: float, mtu: int = MTU) -> float:
    """The most a TCP stream carries of payload through a link of `rate_mbit` that counts
    each frame's headers (as tbf does)."""
    return rate_mbit * (mtu - IP_TCP_HEADERS) / (mtu + ETHERNET_HEADER)


def measure(cluster: Union[Cluster, ExternalHosts], megabytes: int = 200) -> float:
    """Mbit/s of payload one stream carries from the first host to the second."""
    sender, receiver = cluster.names[0], cluster.names[1]
    address = cluster.address(receiver)
    listening = cluster.run(
        receiver,
        [sys.executable, __file__, "receive", address],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert listening.stdout is not None
    port = listening.stdout.readline().strip()
    sending = cluster.run(sender, [sys.executable, __file__, "send", address, port, str(megabytes)])
    try:
        sent = sending.wait(timeout=120) == 0
        received = listening.communicate(timeout=30)[0] if sent else ""
    finally:  # neither end outlives a failed or stuck stream
        for end in (sending, listening):
            if end.poll() is None:
                end.kill()
                end.wait()
    if not received.strip():
        raise RuntimeError(f"the TCP stream from {sender} to {receiver} failed")
    return float(received)


def receive(address: str) -> None:
    """Accepts one stream, reads it to its end and prints the payload's Mbit/s."""
    with socket.create_server((address, 0)) as server:
        print(server.getsockname()[1], flush=True)
        connection, _ = server.accept()
        buffer = bytearray(CHUNK)
        connection.recv_into(buffer)  # the clock starts at the first bytes
        first = last = time.perf_counter()
        total = 0
        count = connection.recv_into(buffer)
        while count:
            total += count
            last = time.perf_counter()
            count = connection.recv_into(buffer)
        print(f"{total * 8 / max(last - first, 1e-9) / 1e6:.1f}")


def send(address: str, port: int, megabytes: int) -> None:
    """Sends `megabytes` MB of zeros and closes."""
    chunk = bytes(CHUNK)
    with socket.create_connection((address, port)) as connection:
        for _ in range(megabytes * 10**6 // CHUNK):
            connection.sendall(chunk)


if __name__ == "__main__":
    if sys.argv[1] == "receive":
        receive(sys.argv[2])
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))

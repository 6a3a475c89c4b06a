"""Opening a connection to the driver or to a peer slot: with a timeout, TCP keepalive, and an
error that names the address and the setting to check, instead of a bare
`ConnectionRefusedError` (multiprocessing's `Client` has neither a timeout nor keepalive)."""

from __future__ import annotations

import socket
from multiprocessing.connection import Connection

from tidegate.common.configuration import ADVERTISED_HOST
from tidegate.runtime.addresses import format_address, unbracket

__all__ = ["CONNECT_TIMEOUT_S", "PeerUnreachableError", "connect"]

#: how long a slot tries to reach the driver or a peer before it gives up
CONNECT_TIMEOUT_S = 10.0
#: keepalive: probe after 10 s idle, every 5 s, give up after 3 (a dead peer shows in ~25 s
#: even when nothing is sent; heartbeats detect it sooner while the job runs)
_KEEPALIVE = (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))

_HINTS = {
    "driver": (
        f"the address the driver advertises must be reachable from every executor: set "
        f"{ADVERTISED_HOST} (or spark.driver.host) to an address of the driver's host the "
        "executors can reach, and let them through any firewall"
    ),
    "peer": (
        "slots on different hosts connect to each other directly: let executors reach each "
        "other on any port (or check that the peer's executor is still alive)"
    ),
}


class PeerUnreachableError(ConnectionError):
    """A connection to the driver or a peer slot could not be opened; says where and why."""


def connect(address: tuple[str, int], role: str, timeout: float = CONNECT_TIMEOUT_S) -> Connection:
    """A Connection to `address` (`role`: "driver" or "peer", for the error's hint); the host
    is a name, an IPv4 or an IPv6 literal (with or without brackets)."""
    host, port = unbracket(address[0]), int(address[1])
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise PeerUnreachableError(
            f"cannot connect to the {role} at {format_address(host, port)} ({reason}; waited up to "
            f"{timeout:g} s): {_HINTS[role]}"
        ) from None
    sock.settimeout(None)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in _KEEPALIVE:
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    return Connection(sock.detach())

"""Opening a connection to the driver or to a peer slot: with a timeout, an error that names
the address and the setting to check instead of a bare `ConnectionRefusedError`, and a bound on
how long a silent peer can hold it (multiprocessing's `Client` has neither).

Every tidegate connection, dialled or accepted, sends what is written at once (TCP_NODELAY), and
is `bound_silence`d with the job's heartbeat timeout. TCP keepalive finds a vanished peer while
nothing is in flight. On control connections (a slot and its driver), which both ends read all
the time on a thread of their own, `TCP_USER_TIMEOUT` also aborts the connection once sent data
stayed unacknowledged that long: a slot cut off from its driver (a partition, a dead host) sees
it fail and ends on its own, and the driver never blocks for the ~15 minutes of TCP's
retransmissions. Data connections between slots do not get it: a receiver that is backpressured
stops reading for as long as it must, and the kernel would count that stall as silence (it
aborts a connection whose window stays closed, too); a slot whose peer vanished mid-send is
ended by its driver instead, which closes the data connections of a cancelled slot
(runtime/slot.py)."""

from __future__ import annotations

import os
import socket
from multiprocessing.connection import Connection

from tidegate.common.configuration import ADVERTISED_HOST
from tidegate.runtime.addresses import format_address, unbracket

__all__ = ["CONNECT_TIMEOUT_S", "PeerUnreachableError", "bound_silence", "connect"]

#: how long a slot tries to reach the driver or a peer before it gives up
CONNECT_TIMEOUT_S = 10.0
#: the silence a connection survives when the job does not say (the default heartbeat timeout)
DEFAULT_SILENCE_S = 50.0

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


def connect(
    address: tuple[str, int],
    role: str,
    timeout: float = CONNECT_TIMEOUT_S,
    silence_s: float = DEFAULT_SILENCE_S,
) -> Connection:
    """A Connection to `address` (`role`: "driver" or "peer", for the error's hint), aborted
    once its peer stayed silent for `silence_s` (see `bound_silence`); the host is a name, an
    IPv4 or an IPv6 literal (with or without brackets)."""
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
    _bound(sock, silence_s, control=role == "driver")
    return Connection(sock.detach())


def bound_silence(conn: Connection, silence_s: float, control: bool) -> None:
    """Make an accepted connection fail once its peer stayed silent for about `silence_s`
    (`control`: a control connection, whose unacknowledged data counts as silence too)."""
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:  # options act on the socket
        _bound(sock, silence_s, control)


def _bound(sock: socket.socket, silence_s: float, control: bool) -> None:
    # keepalive: the first probe after half the bound, then 3 probes in the other half
    options = [
        ("TCP_KEEPIDLE", max(1, int(silence_s / 2))),
        ("TCP_KEEPINTVL", max(1, int(silence_s / 6))),
        ("TCP_KEEPCNT", 3),
    ]
    if control:
        options.append(("TCP_USER_TIMEOUT", max(1000, int(silence_s * 1000))))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # every frame and control message goes out when it is written: with Nagle's algorithm a
    # frame written while the previous one is unacknowledged waited for the peer's delayed
    # ACK (up to ~40 ms on Linux), so frames sent 10 ms apart arrived three or four at once
    # (bench/README.md, Latency)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for name, value in options:
        if hasattr(socket, name):  # Linux has them all
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)

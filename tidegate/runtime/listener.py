"""The TCP listener of the driver's control server and of every slot's data connections.

multiprocessing's `Listener` takes IPv4 addresses only; this one binds IPv4 or IPv6 by the
host (an IPv6 literal has a colon) and hands out the same `Connection`s (multiprocessing's
framing, which every control and data connection uses). The IPv6 wildcard `::` is dual-stack
(IPV6_V6ONLY off), so IPv4 peers still connect. Nothing is read here: the job-secret handshake
(runtime/auth.py) runs on each accepted connection's own thread.
"""

from __future__ import annotations

import contextlib
import socket
from multiprocessing.connection import Connection

from tidegate.runtime.addresses import is_ipv6, is_wildcard, loopback_of, unbracket

__all__ = ["TcpListener"]


class TcpListener:
    """Listens on an ephemeral port of `host` (an IPv4 or IPv6 literal, or a host name, which
    binds IPv4 as before)."""

    def __init__(self, host: str, backlog: int) -> None:
        host = unbracket(host)
        family = socket.AF_INET6 if is_ipv6(host) else socket.AF_INET
        dual_stack = family == socket.AF_INET6 and is_wildcard(host)
        self._sock = socket.create_server(
            (host, 0), family=family, backlog=backlog, dualstack_ipv6=dual_stack
        )
        bound_host, port = self._sock.getsockname()[:2]  # IPv6: flow info, scope id dropped
        #: (host, port) as bound
        self.address: tuple[str, int] = (bound_host, port)

    def accept(self) -> Connection:
        """The next incoming connection (blocks; OSError once closed)."""
        sock, _peer = self._sock.accept()
        sock.setblocking(True)
        return Connection(sock.detach())

    def close(self) -> None:
        """Close, and wake the thread blocked in `accept()` (closing alone does not, on Linux)
        by connecting once, so no thread outlives the job in a reused worker process."""
        host, port = self.address
        dial = loopback_of(host) if is_wildcard(host) else host
        with contextlib.suppress(OSError):  # the listener may already be gone
            socket.create_connection((dial, port), timeout=1).close()
        self._sock.close()

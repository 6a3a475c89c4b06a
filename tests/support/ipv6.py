"""Whether this machine has an IPv6 loopback: containers often run without one, and the IPv6
tests skip there, saying so, instead of failing."""

from __future__ import annotations

import socket

import pytest


def has_ipv6_loopback() -> bool:
    """Whether a socket can listen on `::1`."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


#: marks a test that needs `::1` (`ip -6 addr show lo` lists it)
requires_ipv6 = pytest.mark.skipif(
    not has_ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine"
)

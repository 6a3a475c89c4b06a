"""Host literals as the driver and the slots handle them, IPv4 and IPv6 alike: which family a
host is, the wildcard and loopback of that family, and how an address is written in messages
(`[::1]:7077`, as in URLs, so the port stays readable)."""

from __future__ import annotations

import ipaddress

__all__ = [
    "ALL_INTERFACES",
    "ALL_INTERFACES_V6",
    "LOOPBACK",
    "LOOPBACK_V6",
    "format_address",
    "is_ipv6",
    "is_loopback",
    "is_wildcard",
    "loopback_of",
    "unbracket",
    "wildcard_of",
]

LOOPBACK = "127.0.0.1"
LOOPBACK_V6 = "::1"
ALL_INTERFACES = "0.0.0.0"
#: dual-stack where the listener is opened (runtime/listener.py): IPv4 peers connect too
ALL_INTERFACES_V6 = "::"


def unbracket(host: str) -> str:
    """`[fd00::1]` -> `fd00::1`: a host as written in a URL, as sockets take it."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_ipv6(host: str) -> bool:
    """Whether `host` is an IPv6 literal (a host name or IPv4 address has no colon)."""
    return ":" in host


def is_wildcard(host: str) -> bool:
    """Whether binding `host` means all interfaces (nothing a peer could dial)."""
    if host == "":
        return True
    try:
        return ipaddress.ip_address(unbracket(host)).is_unspecified
    except ValueError:
        return False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(unbracket(host)).is_loopback
    except ValueError:
        return False


def wildcard_of(host: str) -> str:
    """All interfaces in `host`'s family (IPv4 for a host name)."""
    return ALL_INTERFACES_V6 if is_ipv6(host) else ALL_INTERFACES


def loopback_of(host: str) -> str:
    """The loopback address in `host`'s family (IPv4 for a host name)."""
    return LOOPBACK_V6 if is_ipv6(host) else LOOPBACK


def format_address(host: str, port: int) -> str:
    """`host:port`, with an IPv6 literal in brackets: `[::1]:41234`."""
    host = unbracket(host)
    return f"[{host}]:{port}" if is_ipv6(host) else f"{host}:{port}"

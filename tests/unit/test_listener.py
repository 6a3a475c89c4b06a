"""The listeners of the control server and the slots (runtime/listener.py) on IPv4 and IPv6,
the dual-stack `::`, and how addresses are advertised and written (runtime/addresses.py,
runtime/network.py)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from tests.support.ipv6 import requires_ipv6
from tidegate.runtime import network
from tidegate.runtime.addresses import format_address, is_wildcard
from tidegate.runtime.listener import TcpListener
from tidegate.runtime.network import advertised_address


def _accepts(listener: TcpListener, host: str) -> bool:
    """Whether a connection to `host` at the listener's port is accepted and carries bytes."""
    client = socket.create_connection((host, listener.address[1]), timeout=5)
    try:
        accepted = listener.accept()
        client.sendall(b"\x00\x00\x00\x02hi")  # one multiprocessing frame
        ok = accepted.recv_bytes() == b"hi"
        accepted.close()
        return ok
    finally:
        client.close()


def test_an_ipv4_listener_hands_out_connections_with_multiprocessing_framing():
    listener = TcpListener("127.0.0.1", backlog=4)
    try:
        assert listener.address[0] == "127.0.0.1"
        assert _accepts(listener, "127.0.0.1")
    finally:
        listener.close()


@requires_ipv6
@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_an_ipv6_listener_binds_the_ipv6_loopback_only(host):
    listener = TcpListener(host, backlog=4)
    try:
        assert listener.address[0] == "::1"  # a 2-tuple: flow info and scope id dropped
        assert len(listener.address) == 2
        assert _accepts(listener, "::1")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", listener.address[1]), timeout=5)
    finally:
        listener.close()


@requires_ipv6
def test_the_ipv6_wildcard_is_dual_stack_so_ipv4_peers_still_connect():
    listener = TcpListener("::", backlog=4)
    try:
        assert listener.address[0] == "::"
        assert _accepts(listener, "::1")
        assert _accepts(listener, "127.0.0.1")
    finally:
        listener.close()


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "0.0.0.0", pytest.param("::1", marks=requires_ipv6),
     pytest.param("::", marks=requires_ipv6)],
)  # fmt: skip
def test_closing_a_listener_wakes_the_thread_blocked_in_accept(host):
    listener = TcpListener(host, backlog=4)
    blocked = threading.Event()
    returned = threading.Event()

    def accept_once() -> None:
        blocked.set()
        with contextlib.suppress(OSError):  # the wake-up connection, or the closed socket
            listener.accept().close()
        returned.set()

    threading.Thread(target=accept_once, daemon=True).start()
    assert blocked.wait(5)
    time.sleep(0.1)  # into accept()
    listener.close()
    assert returned.wait(5)


def test_a_wildcard_bind_advertises_the_reachable_host_in_either_family():
    assert advertised_address(("0.0.0.0", 7), "10.0.0.5") == ("10.0.0.5", 7)
    assert advertised_address(("::", 7), "fd00::5") == ("fd00::5", 7)
    assert advertised_address(("::1", 7), "fd00::5") == ("::1", 7)  # a bound host is kept
    assert is_wildcard("::") and is_wildcard("0.0.0.0") and is_wildcard("")
    assert not is_wildcard("::1") and not is_wildcard("host.example")


def test_without_a_reachable_host_an_ipv6_wildcard_prefers_the_host_names_ipv6_address(
    monkeypatch,
):
    answers = {
        socket.AF_UNSPEC: [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.7", 0)),
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2001:db8::7", 0, 0, 0)),
        ],
        socket.AF_INET: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.7", 0))],
    }
    monkeypatch.setattr(network.socket, "getaddrinfo", lambda _n, _p, family: answers[family])
    assert advertised_address(("::", 7), None) == ("2001:db8::7", 7)
    assert advertised_address(("0.0.0.0", 7), None) == ("192.0.2.7", 7)
    # a host name without an IPv6 address: its IPv4 one, which the dual-stack `::` accepts
    answers[socket.AF_UNSPEC] = answers[socket.AF_INET]
    assert advertised_address(("::", 7), None) == ("192.0.2.7", 7)


@pytest.mark.parametrize(
    ("host", "written"),
    [("10.0.0.5", "10.0.0.5:80"), ("::1", "[::1]:80"), ("[fd00::1]", "[fd00::1]:80"),
     ("driver.example", "driver.example:80")],
)  # fmt: skip
def test_an_address_is_written_with_ipv6_literals_in_brackets(host, written):
    assert format_address(host, 80) == written

"""Connections to the driver and to peers (runtime/connect.py): keepalive on, and a refused
connection names the address (IPv6 in brackets) and what to check."""

from __future__ import annotations

import socket

import pytest

from tests.support.ipv6 import requires_ipv6
from tidegate.runtime.connect import PeerUnreachableError, connect


def _closed_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]  # nothing listens there once closed


def test_a_refused_connection_names_the_address_and_the_setting_to_check():
    port = _closed_port()
    with pytest.raises(PeerUnreachableError) as error:
        connect(("127.0.0.1", port), "driver", timeout=2)
    message = str(error.value)
    assert f"cannot connect to the driver at 127.0.0.1:{port}" in message
    assert "tidegate.network.advertised-host" in message
    with pytest.raises(PeerUnreachableError, match="slots on different hosts"):
        connect(("127.0.0.1", port), "peer", timeout=2)


def test_a_connection_has_keepalive_on():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        conn = connect(server.getsockname(), "peer")
        with socket.socket(fileno=conn.fileno()) as sock:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            sock.detach()
        conn.close()


@requires_ipv6
def test_a_refused_ipv6_connection_names_the_address_in_brackets():
    port = _closed_port("::1")
    with pytest.raises(PeerUnreachableError, match=rf"the peer at \[::1\]:{port} "):
        connect(("::1", port), "peer", timeout=2)


@requires_ipv6
@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_an_ipv6_literal_is_dialled_with_or_without_brackets(host):
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as server:
        conn = connect((host, server.getsockname()[1]), "driver")
        accepted, peer = server.accept()
        assert peer[0] == "::1"
        conn.send_bytes(b"over ipv6")
        assert accepted.recv(64).endswith(b"over ipv6")
        accepted.close()
        conn.close()

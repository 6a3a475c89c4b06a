"""Connections to the driver and to peers (runtime/connect.py): keepalive on, and a refused
connection names the address and what to check."""

from __future__ import annotations

import socket

import pytest

from tidegate.runtime.connect import PeerUnreachableError, connect


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
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

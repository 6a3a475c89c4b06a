"""Connections to the driver and to peers (runtime/connect.py): a refused connection names the
address (IPv6 in brackets) and what to check; silence is bounded by keepalive, and on control
connections by TCP_USER_TIMEOUT, which a backpressured data connection must not get; every
connection sends what is written at once (TCP_NODELAY)."""

from __future__ import annotations

import socket
import threading
import time
from multiprocessing.connection import Connection

import pytest

from tests.support.ipv6 import requires_ipv6
from tidegate.runtime.connect import PeerUnreachableError, bound_silence, connect


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


def _options(conn) -> tuple[int, int, int, int]:
    with socket.socket(fileno=conn.fileno()) as sock:
        try:
            return (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
            )
        finally:
            sock.detach()


@pytest.fixture
def listening():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server


def test_a_control_connection_fails_after_the_silence_bound_a_data_connection_keeps_alive(
    listening,
):
    control = connect(listening.getsockname(), "driver", silence_s=8)
    data = connect(listening.getsockname(), "peer", silence_s=8)
    # keepalive from half the bound; user timeout; every write sent at once (no Nagle)
    assert _options(control) == (1, 4, 8000, 1)
    assert _options(data) == (1, 4, 0, 1)  # no user timeout
    accepted, _ = listening.accept()
    conn = Connection(accepted.detach())
    bound_silence(conn, 8, control=True)
    assert _options(conn) == (1, 4, 8000, 1)
    for c in (control, data, conn):
        c.close()


def test_a_data_connection_to_a_backpressured_reader_outlives_the_silence_bound(listening):
    """A receiver that stops reading (backpressure) is not a dead peer: its closed window must
    not abort the connection, as TCP_USER_TIMEOUT would."""
    data = connect(listening.getsockname(), "peer", silence_s=1)
    stalled, _ = listening.accept()  # never reads while the sender fills its window
    sent: list[int] = []
    failed: list[BaseException] = []

    def pump() -> None:
        try:
            while True:
                data.send_bytes(b"x" * 65536)
                sent.append(1)
        except OSError as e:
            failed.append(e)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    time.sleep(4)  # four times the bound, with the window closed
    assert not failed, failed
    blocked_at = len(sent)
    received = 0
    stalled.settimeout(10)
    while received < 65536 * 4:  # reading again unblocks the sender
        received += len(stalled.recv(1 << 20))
    deadline = time.monotonic() + 10
    while len(sent) <= blocked_at and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(sent) > blocked_at and not failed
    stalled.close()  # the pump's next send fails: it ends before its connection is closed
    pumping.join(10)
    assert not pumping.is_alive() and failed
    data.close()


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

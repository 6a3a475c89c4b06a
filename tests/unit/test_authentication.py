"""Frames carry pickled objects, so every connection must prove it knows the job's secret
(mutual HMAC-SHA256 challenge), and servers listen on loopback unless configured otherwise."""

from __future__ import annotations

import pickle
import queue
import secrets
import socket
from multiprocessing.connection import Client

import pytest

from tests.support.ipv6 import requires_ipv6
from tidegate.deploy.control_server import ControlServer
from tidegate.runtime.auth import AuthenticationFailedError, authenticate_client
from tidegate.runtime.connect import connect as dial
from tidegate.runtime.gate import InputGate
from tidegate.runtime.messages import RegisterSlot
from tidegate.runtime.network import SlotNetwork

REFUSED = (AuthenticationFailedError, EOFError, OSError)


@pytest.fixture
def secret() -> bytes:
    return secrets.token_bytes(32)


def connect(address, secret: bytes):
    conn = Client(address)
    authenticate_client(conn, secret)
    return conn


def test_the_control_server_listens_on_loopback_and_refuses_a_wrong_secret(secret):
    events: queue.Queue = queue.Queue()
    server = ControlServer(secret, "127.0.0.1", events.put, 50.0)
    try:
        assert server.address[0] == "127.0.0.1"
        with pytest.raises(REFUSED):
            connect(server.address, b"not the job secret")
        good = connect(server.address, secret)
        good.send(RegisterSlot(0, 0, 1, "h", ("127.0.0.1", 1)))
        assert isinstance(events.get(timeout=5), RegisterSlot)
        assert events.empty()  # the refused peer delivered nothing
        good.close()
    finally:
        server.close()


def test_a_slot_data_listener_refuses_a_wrong_secret_and_delivers_nothing(secret):
    gate = InputGate(4)
    network = SlotNetwork(0, secret, "127.0.0.1", {1: gate}, {}, 50.0)
    try:
        assert network.address[0] == "127.0.0.1"
        with pytest.raises(REFUSED):
            connect(network.address, b"wrong")
        assert gate.get(0.2) is None
        peer = connect(network.address, secret)
        peer.send((1, 1))  # hello: from slot 1, to vertex 1
        peer.send_bytes(pickle.dumps((0, [1, 2, 3])))
        assert gate.get(5) == (False, (0, [1, 2, 3]))
        peer.close()
    finally:
        network.close()


def test_a_client_that_never_answers_does_not_block_other_connections(secret):
    events: queue.Queue = queue.Queue()
    server = ControlServer(secret, "127.0.0.1", events.put, 50.0)
    silent = socket.create_connection(server.address)  # connects, then says nothing
    try:
        good = connect(server.address, secret)
        good.send(RegisterSlot(0, 3, 1, "h", ("127.0.0.1", 1)))
        assert events.get(timeout=5).slot == 3
        good.close()
    finally:
        silent.close()
        server.close()


def test_a_server_without_the_secret_is_not_trusted_by_the_client(secret):
    other = ControlServer(secrets.token_bytes(32), "127.0.0.1", lambda _m: None, 50.0)
    try:
        with pytest.raises(REFUSED):
            connect(other.address, secret)
    finally:
        other.close()


def connect_any(address, secret: bytes):
    """An authenticated client over IPv4 or IPv6 (multiprocessing's Client is IPv4-only)."""
    conn = dial(address, "peer", timeout=5)
    authenticate_client(conn, secret)
    return conn


@requires_ipv6
@pytest.mark.parametrize(
    ("bind", "dialled"),
    [("::1", ["::1"]), ("::", ["::1", "127.0.0.1"])],
    ids=["ipv6-loopback", "dual-stack"],
)
def test_the_control_server_on_ipv6_authenticates_like_on_ipv4(secret, bind, dialled):
    events: queue.Queue = queue.Queue()
    server = ControlServer(secret, bind, events.put, 50.0)
    try:
        assert server.address[0] == bind
        port = server.address[1]
        clients = []
        for slot, host in enumerate(dialled):
            with pytest.raises(REFUSED):
                connect_any((host, port), b"not the job secret")
            clients.append(connect_any((host, port), secret))
            clients[-1].send(RegisterSlot(0, slot, 1, "h", (host, 1)))
            registered = events.get(timeout=5)
            assert isinstance(registered, RegisterSlot) and registered.slot == slot
        assert events.empty()  # the refused peers delivered nothing
        for client in clients:
            client.close()
    finally:
        server.close()


@requires_ipv6
def test_a_slot_data_listener_on_ipv6_refuses_a_wrong_secret_and_delivers_frames(secret):
    gate = InputGate(4)
    network = SlotNetwork(0, secret, "::1", {1: gate}, {}, 50.0)
    try:
        assert network.address[0] == "::1"
        with pytest.raises(REFUSED):
            connect_any(network.address, b"wrong")
        assert gate.get(0.2) is None
        peer = connect_any(network.address, secret)
        peer.send((1, 1))  # hello: from slot 1, to vertex 1
        peer.send_bytes(pickle.dumps((0, [4, 5])))
        assert gate.get(5) == (False, (0, [4, 5]))
        peer.close()
    finally:
        network.close()

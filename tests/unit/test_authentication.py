"""Frames carry pickled objects, so every connection must prove it knows the job's secret
(mutual HMAC-SHA256 challenge), and servers listen on loopback unless configured otherwise."""

from __future__ import annotations

import os
import pickle
import queue
import secrets
import socket
import struct
import threading
import time
from multiprocessing.connection import Client, Connection

import pytest

from tests.support.ipv6 import requires_ipv6
from tests.support.sockets import Marker, framed
from tidegate.deploy.control_server import ControlServer
from tidegate.runtime.auth import (
    AuthenticationFailedError,
    authenticate_client,
    authenticate_server,
    proof,
)
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


def test_a_server_that_closes_during_the_handshake_is_named_as_such(secret):
    with socket.create_server(("127.0.0.1", 0)) as server:
        dialled = Client(server.getsockname())
        accepted, _ = server.accept()
        accepted.close()  # a peer that died before sending its challenge
        with pytest.raises(AuthenticationFailedError, match="the server closed the connection"):
            authenticate_client(dialled, secret)
        dialled.close()


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


# the handshake itself (runtime/auth.py), over a socket pair --------------------------------
def pair() -> tuple[Connection, socket.socket]:
    """A Connection for the side under test and the raw socket of its peer."""
    ours, theirs = socket.socketpair()
    return Connection(ours.detach()), theirs


def server_outcome(conn: Connection, secret: bytes, timeout_s: float = 30.0):
    """Run authenticate_server on a thread; a callable that returns its error (None: passed)."""
    result: queue.Queue = queue.Queue()

    def run() -> None:
        try:
            authenticate_server(conn, secret, timeout_s)
            result.put(None)
        except Exception as e:
            result.put(e)
        finally:
            conn.close()

    threading.Thread(target=run, daemon=True).start()
    return lambda: result.get(timeout=timeout_s + 10)


def read_challenge(peer: socket.socket) -> bytes:
    peer.settimeout(10)
    header = peer.recv(4, socket.MSG_WAITALL)
    return peer.recv(struct.unpack("!i", header)[0], socket.MSG_WAITALL)


def test_both_sides_prove_the_secret_then_frames_flow(secret):
    server_side, client_raw = pair()
    client = Connection(client_raw.detach())
    outcome = server_outcome(server_side, secret)
    authenticate_client(client, secret)
    assert outcome() is None
    client.close()


def test_the_two_roles_prove_differently_so_a_proof_cannot_be_reflected(secret):
    nonce = os.urandom(32)
    assert proof(secret, nonce, b"client") != proof(secret, nonce, b"server")
    assert proof(secret, nonce, b"client") != proof(b"other", nonce, b"client")


def test_a_wrong_proof_gets_no_answer_so_there_is_nothing_to_harvest(secret):
    conn, peer = pair()
    outcome = server_outcome(conn, secret)
    challenge = read_challenge(peer)
    peer.sendall(framed(proof(b"wrong", challenge, b"client") + os.urandom(32)))
    assert "does not know the job secret" in str(outcome())
    assert peer.recv(100) == b""  # closed without a server proof
    peer.close()


def test_a_client_refuses_a_server_that_does_not_know_the_secret(secret):
    client_side, server_raw = pair()
    server = Connection(server_raw.detach())
    impostor = server_outcome(server, b"not the job secret")
    with pytest.raises(AuthenticationFailedError):
        authenticate_client(client_side, secret, timeout_s=30)
    client_side.close()
    assert isinstance(impostor(), AuthenticationFailedError)


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (struct.pack("!i", 0x7FFFFFFF), "bad message length"),  # 2 GiB announced, never read
        (struct.pack("!iQ", -1, 1 << 60), "bad message length"),  # the 8-byte length form
        (struct.pack("!i", -5), "malformed proof"),
        (framed(b"x" * 10), "malformed proof"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "bad message length"),
    ],
    ids=["huge-length", "huge-extended-length", "negative-length", "short", "http"],
)
def test_garbage_is_refused_from_its_length_without_waiting_or_reading_it(secret, garbage, reason):
    conn, peer = pair()
    outcome = server_outcome(conn, secret, timeout_s=60)  # a refusal by deadline would say so
    read_challenge(peer)
    peer.sendall(garbage)
    error = outcome()
    assert isinstance(error, AuthenticationFailedError) and reason in str(error)
    peer.close()


def test_a_pickle_instead_of_a_proof_is_never_unpickled(secret, tmp_path):
    marker = tmp_path / "unpickled"
    conn, peer = pair()
    outcome = server_outcome(conn, secret)
    read_challenge(peer)
    peer.sendall(framed(pickle.dumps(Marker(marker))))
    assert isinstance(outcome(), AuthenticationFailedError)
    assert not marker.exists()
    assert pickle.loads(pickle.dumps(Marker(marker))) is not None and marker.exists()  # armed
    peer.close()


@pytest.mark.parametrize(
    "sent", [b"", b"\x00\x00", framed(b"x" * 64)[:20]], ids=["silent", "half-length", "truncated"]
)
def test_a_silent_or_truncated_peer_is_cut_off_at_the_deadline(secret, sent):
    conn, peer = pair()
    outcome = server_outcome(conn, secret, timeout_s=0.5)
    read_challenge(peer)
    peer.sendall(sent)
    error = outcome()
    assert "did not complete the handshake within 0.5 s" in str(error)
    peer.close()


def test_a_peer_dripping_its_proof_byte_by_byte_is_cut_off_at_the_deadline(secret):
    conn, peer = pair()
    outcome = server_outcome(conn, secret, timeout_s=0.5)
    challenge = read_challenge(peer)
    message = framed(proof(secret, challenge, b"client") + os.urandom(32))
    for byte in message[:-1]:  # would complete the proof after ~6.8 s
        try:
            peer.sendall(bytes([byte]))
        except OSError:
            break
        time.sleep(0.1)
    assert "did not complete the handshake" in str(outcome())
    peer.close()

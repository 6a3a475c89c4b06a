"""Frames carry pickled objects, so every connection must prove it knows the job's secret,
and servers listen on loopback unless configured otherwise."""

from __future__ import annotations

import pickle
import queue
import secrets
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client

import pytest

from tidegate.deploy.control_server import ControlServer
from tidegate.runtime.gate import InputGate
from tidegate.runtime.messages import RegisterSlot
from tidegate.runtime.network import SlotNetwork


@pytest.fixture
def secret() -> bytes:
    return secrets.token_bytes(32)


def test_the_control_server_listens_on_loopback_and_refuses_a_wrong_secret(secret):
    events: queue.Queue = queue.Queue()
    server = ControlServer(secret, "127.0.0.1", events.put)
    try:
        assert server.address[0] == "127.0.0.1"
        with pytest.raises(AuthenticationError):
            Client(server.address, authkey=b"not the job secret")
        assert events.empty()
        good = Client(server.address, authkey=secret)
        good.send(RegisterSlot(0, 0, 1, "h", ("127.0.0.1", 1)))
        assert isinstance(events.get(timeout=5), RegisterSlot)
        good.close()
    finally:
        server.close()


def test_a_slot_data_listener_refuses_a_wrong_secret_and_delivers_nothing(secret):
    gate = InputGate(4)
    network = SlotNetwork(0, secret, "127.0.0.1", {1: gate})
    try:
        assert network.address[0] == "127.0.0.1"
        with pytest.raises(AuthenticationError):
            Client(network.address, authkey=b"wrong")
        assert gate.get(0.2) is None
        peer = Client(network.address, authkey=secret)
        peer.send((1, 1))  # hello: from slot 1, to vertex 1
        peer.send_bytes(pickle.dumps((0, [1, 2, 3])))
        assert gate.get(5) == (False, (0, [1, 2, 3]))
        peer.close()
    finally:
        network.close()

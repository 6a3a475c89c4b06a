"""The driver's control server hands every message of a registered slot to its handler: an
error the handler raises is not taken for a closed connection (it ends the slot's reader with
its traceback), and a closed connection makes the slot lost."""

from __future__ import annotations

import queue
import secrets
import threading
from multiprocessing.connection import Client

import pytest

from tests.support.waiting import wait_until
from tidegate.deploy.control_server import ControlServer, SlotLost
from tidegate.runtime.auth import authenticate_client
from tidegate.runtime.messages import RegisterSlot

SECRET = secrets.token_bytes(32)


@pytest.fixture
def registered():
    """(server, an authenticated slot connection that registered as slot 0, the messages the
    handler got); the handler raises TypeError on the message "bad"."""
    got: queue.Queue = queue.Queue()

    def handle(message) -> None:
        if message == "bad":
            raise TypeError("the handler cannot take 'bad'")
        got.put(message)

    server = ControlServer(SECRET, "127.0.0.1", handle, 50.0)
    conn = Client(server.address)
    authenticate_client(conn, SECRET)
    conn.send(RegisterSlot(0, 0, 1, "h", ("127.0.0.1", 1)))
    assert isinstance(got.get(timeout=5), RegisterSlot)
    yield server, conn, got
    conn.close()
    server.close()


def test_an_error_of_the_handler_ends_the_reader_with_its_traceback(registered, monkeypatch):
    _server, conn, got = registered
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    conn.send("good")
    assert got.get(timeout=5) == "good"
    conn.send("bad")
    wait_until(lambda: raised, "the handler's error reached threading.excepthook", timeout=5)
    assert [type(e) for e in raised] == [TypeError]
    assert str(raised[0]) == "the handler cannot take 'bad'"
    assert got.get(timeout=5) == SlotLost(0, 0)  # the slot no longer has a reader


def test_a_closed_connection_makes_the_slot_lost_and_raises_nothing(registered, monkeypatch):
    _server, conn, got = registered
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    conn.close()
    assert got.get(timeout=5) == SlotLost(0, 0)
    assert raised == []

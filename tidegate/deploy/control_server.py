"""The driver's control server: slots connect (HMAC-authenticated with the job secret),
register, and exchange control messages. Every incoming message is handed to one callback.
It listens on IPv4 or IPv6 by its bind host (runtime/listener.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from tidegate.runtime.auth import AuthenticationFailedError, authenticate_server
from tidegate.runtime.connect import bound_silence
from tidegate.runtime.listener import TcpListener
from tidegate.runtime.messages import RegisterSlot, SlotFailed
from tidegate.runtime.network import shutdown_connection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlotLost:
    """The control connection of a registered slot closed (its process died or it ended)."""

    attempt: int
    slot: int


#: what _received returns once the connection is closed
_CLOSED = object()


def _received(conn: Connection) -> Any:
    """The next message from `conn`, or _CLOSED when the peer closed it or close() did (a
    recv racing with close() raises TypeError inside multiprocessing)."""
    try:
        return conn.recv()
    except (EOFError, OSError, TypeError):
        return _CLOSED


class ControlServer:
    def __init__(
        self,
        secret: bytes,
        bind_host: str,
        on_message: Callable[[Any], None],
        silence_s: float,
    ) -> None:
        self.secret = secret
        self.silence_s = silence_s  # a slot silent this long: its connection fails
        self.listener = TcpListener(bind_host, backlog=256)
        self.address: tuple[str, int] = self.listener.address
        self.on_message = on_message
        self._slots: dict[tuple[int, int], tuple[Connection, threading.Lock]] = {}
        self._closed = False
        threading.Thread(
            target=self._accept_loop, name="tidegate-control-accept", daemon=True
        ).start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn = self.listener.accept()
            except OSError:
                return
            if self._closed:
                conn.close()
                return
            bound_silence(conn, self.silence_s, control=True)
            threading.Thread(target=self._read_loop, args=(conn,), daemon=True).start()

    def _read_loop(self, conn: Connection) -> None:
        key = None
        try:
            authenticate_server(conn, self.secret)
        except (AuthenticationFailedError, OSError, EOFError) as e:
            if not self._closed:
                log.warning("refused a control connection: %s", e)
            conn.close()
            return
        try:
            first = _received(conn)
            if isinstance(first, SlotFailed):  # a worker that could not even load the job
                self.on_message(first)
                return
            if not isinstance(first, RegisterSlot):
                conn.close()
                return
            key = (first.attempt, first.slot)
            self._slots[key] = (conn, threading.Lock())
            self.on_message(first)
            # what the handler raises is a bug of the driver: it ends this thread with its
            # traceback (and the slot counts as lost), never passed over
            while (message := _received(conn)) is not _CLOSED:
                self.on_message(message)
        finally:
            if key is not None:
                self._slots.pop(key, None)
                self.on_message(SlotLost(*key))

    def send(self, attempt: int, slot: int, message: Any) -> bool:
        entry = self._slots.get((attempt, slot))
        if entry is None:
            return False
        conn, lock = entry
        try:
            with lock:
                conn.send(message)
            return True
        except OSError:
            return False

    def broadcast(self, attempt: int, message: Any) -> None:
        for a, slot in list(self._slots):
            if a == attempt:
                self.send(a, slot, message)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        for conn, _ in list(self._slots.values()):
            shutdown_connection(conn)

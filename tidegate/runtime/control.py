"""The slot's side of the control connection to the driver."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from tidegate.runtime.auth import authenticate_client
from tidegate.runtime.connect import DEFAULT_SILENCE_S, connect


class ControlClient:
    def __init__(
        self, address: tuple[str, int], secret: bytes, silence_s: float = DEFAULT_SILENCE_S
    ) -> None:
        self.conn = connect(tuple(address), "driver", silence_s=silence_s)
        try:
            authenticate_client(self.conn, secret)
        except BaseException:
            self.conn.close()
            raise
        self._lock = threading.Lock()
        self._closed = False

    def send(self, message: Any) -> bool:
        """Send to the driver; False if the connection is closed or broken."""
        with self._lock:
            if self._closed:
                return False
            try:
                self.conn.send(message)
            except OSError:
                return False
            return True

    def conn_local_host(self) -> str:
        """This end's IP address on the connection to the driver."""
        with socket.socket(fileno=os.dup(self.conn.fileno())) as sock:
            return sock.getsockname()[0]

    def start_reader(self, on_message: Callable[[Any], None], on_lost: Callable[[], None]) -> None:
        def loop() -> None:
            try:
                while True:
                    on_message(self.conn.recv())
            except Exception:  # EOF, reset, or a recv racing with close()
                if not self._closed:
                    on_lost()

        threading.Thread(target=loop, name="tidegate-control", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.conn.close()

"""How connectors reach NATS: a server URL and timeouts, and a client on an event loop thread
of its own (nats-py is asyncio; connector methods are called on a task's thread and wait for
the loop with a timeout)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NatsConnection:
    """`servers`: comma-separated URLs (`nats://host:4222`). `request_timeout_s` bounds every
    JetStream API call and publish acknowledgement."""

    servers: str = "nats://127.0.0.1:4222"
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 10.0


class NatsClient:
    """A connected nats-py client and its JetStream context on a private event loop thread."""

    def __init__(self, connection: NatsConnection) -> None:
        try:
            import nats
        except ImportError:
            raise ImportError(
                "the NATS connectors need the nats-py package: pip install 'tidegate[nats]'"
            ) from None
        self.connection = connection
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nats", daemon=True)
        self._thread.start()
        try:
            self.nc = self.run(
                nats.connect(
                    connection.servers.split(","),
                    connect_timeout=connection.connect_timeout_s,
                    allow_reconnect=True,
                    max_reconnect_attempts=5,
                ),
                connection.connect_timeout_s + 5,
            )
        except BaseException:
            self._stop_loop()
            raise
        self.js = self.nc.jetstream(timeout=connection.request_timeout_s)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coroutine` on the loop and wait for its result (at most `timeout` seconds;
        default: the request timeout plus a second)."""
        if timeout is None:
            timeout = self.connection.request_timeout_s + 1
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        finally:
            future.cancel()  # a timed-out coroutine must not go on (no-op once done)

    def close(self) -> None:
        """Close the connection (at most a few seconds), then stop the loop thread."""
        try:
            self.run(self.nc.close(), 5)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

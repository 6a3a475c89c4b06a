"""A real local asyncio lookup service for Async I/O (tests/e2e/test_async_io.py and
bench/async_io.py): a TCP server on a free loopback port answering `key` with `key * key`
after a latency, many requests at once, and the clients that ask it.

Protocol: one line per request, `<request id> <key>`; one line per answer,
`<request id> <key * key>`, sent when the request's latency has passed (answers may overtake
each other). One connection carries many requests at once.

* `LookupServer`: runs on an event loop thread of its own; `latency_ms + (key % 5) *
  spread_ms` per request (a spread makes answers overtake each other), counts requests.
* `LookupClient`: one connection, multiplexed: many `await lookup(key)` at once.
* `Lookup`: the AsyncFunction of the jobs: `value -> ["value,value*value"]`; optionally
  raises once per attempt at given values (an injected failure).
* `sequential_lookups`: the baseline, a bare loop doing the same requests one by one;
  `concurrent_lookups`: a plain asyncio program doing them `capacity` at a time.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from typing import Any

from tidegate.datastream import AsyncFunction

__all__ = ["Lookup", "LookupClient", "LookupServer", "concurrent_lookups", "sequential_lookups"]


class LookupServer:
    def __init__(self, latency_ms: float = 20.0, spread_ms: float = 0.0) -> None:
        self.latency_ms = latency_ms
        self.spread_ms = spread_ms
        self.host = "127.0.0.1"
        self.port = 0
        self.requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> LookupServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lookup-service", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the lookup service did not start within 10 s")

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(self._serve, self.host, 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:  # close the connections, let their handlers end, then the loop
            server.close()
            for writer in list(self._writers):
                writer.close()
            loop.run_until_complete(asyncio.sleep(0.05))
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answering: set[asyncio.Task] = set()
        self._writers.add(writer)
        try:
            while line := await reader.readline():
                request_id, key = line.split()
                task = asyncio.create_task(self._answer(writer, request_id, int(key)))
                answering.add(task)
                task.add_done_callback(answering.discard)
        except (ConnectionError, ValueError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, request_id: bytes, key: int) -> None:
        await asyncio.sleep((self.latency_ms + (key % 5) * self.spread_ms) / 1000)
        self.requests += 1
        if not writer.is_closing():
            writer.write(b"%s %d\n" % (request_id, key * key))


class LookupClient:
    """One connection to a LookupServer; `lookup` may be awaited many times at once."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._writer: asyncio.StreamWriter | None = None
        self._connecting: asyncio.Lock | None = None
        self._waiting: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()
        self._reader_task: asyncio.Task | None = None

    async def lookup(self, key: int) -> int:
        if self._writer is None:
            await self._connect()
        assert self._writer is not None
        request_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        try:
            self._writer.write(b"%d %d\n" % (request_id, key))
            return await answer
        finally:
            self._waiting.pop(request_id, None)

    async def _connect(self) -> None:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is not None:
                return
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self._reader_task = asyncio.create_task(self._read(reader))
            self._writer = writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                request_id, value = line.split()
                answer = self._waiting.get(int(request_id))
                if answer is not None and not answer.done():
                    answer.set_result(int(value))
        finally:
            self._writer = None
            for answer in self._waiting.values():
                if not answer.done():
                    answer.set_exception(
                        ConnectionError("the lookup service closed the connection")
                    )

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()


class Lookup(AsyncFunction):
    """`value -> ["value,value*value"]`, asked of the lookup service. `fail_at`: attempt ->
    the value whose request raises in that attempt (injected failures)."""

    def __init__(self, host: str, port: int, fail_at: dict[int, int] | None = None) -> None:
        self.host, self.port = host, port
        self.fail_at = fail_at or {}

    def open(self, runtime_context: Any) -> None:
        self.client = LookupClient(self.host, self.port)
        self.failing = self.fail_at.get(runtime_context.get_attempt_number())

    async def async_invoke(self, value: int) -> list[str]:
        if value == self.failing:
            raise ConnectionResetError(f"injected failure at {value}")
        return [f"{value},{await self.client.lookup(value)}"]

    def close(self) -> None:
        self.client.close()


def concurrent_lookups(host: str, port: int, keys: range, capacity: int) -> float:
    """A plain asyncio program doing the same requests, at most `capacity` at once (one
    LookupClient, a semaphore): the ceiling of one process on this machine. Returns seconds."""

    async def run() -> float:
        client = LookupClient(host, port)
        slots = asyncio.Semaphore(capacity)

        async def one(key: int) -> int:
            async with slots:
                return await client.lookup(key)

        started = time.perf_counter()
        answers = await asyncio.gather(*(one(k) for k in keys))
        seconds = time.perf_counter() - started
        client.close()
        assert answers == [k * k for k in keys]
        return seconds

    return asyncio.run(run())


def sequential_lookups(host: str, port: int, keys: range) -> list[int]:
    """The baseline: a bare Python loop asking the service for each key in turn (blocking
    socket, one request at a time)."""
    answers = []
    with socket.create_connection((host, port)) as sock:
        stream = sock.makefile("rwb")
        for i, key in enumerate(keys):
            stream.write(b"%d %d\n" % (i, key))
            stream.flush()
            answers.append(int(stream.readline().split()[1]))
    return answers

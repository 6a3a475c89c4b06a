"""Channels between subtasks.

Transport: one TCP connection, authenticated by runtime/auth.py, per (sending slot, receiving
slot, receiving vertex), carrying frames `(channel index, payload)` where payload is a list
of records or an event.
A connection feeds exactly one vertex's input gate, so a full gate only stops upstream work
for that vertex: waits always point downstream in the DAG and cannot form a cycle (a connection
shared by several vertices could deadlock). Inside a slot, frames go straight into the gate.
Backpressure: a full gate blocks the reader thread, TCP fills, and the sender blocks. A
transport's `send` returns the seconds it took (blocked, under backpressure); each RecordWriter
adds them up as its subtask's backpressured time (tidegate/metrics/job_metrics.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from time import perf_counter
from typing import Any

from tidegate.common.type_format import RecordTypeError
from tidegate.runtime.addresses import is_ipv6, is_wildcard
from tidegate.runtime.auth import (
    AuthenticationFailedError,
    authenticate_client,
    authenticate_server,
)
from tidegate.runtime.connect import bound_silence, connect
from tidegate.runtime.events import Watermark, WatermarkStatus
from tidegate.runtime.frames import TypedEdge, decode_frame, encode_frame, encode_typed_frame
from tidegate.runtime.gate import InputGate, TaskCancelledError
from tidegate.runtime.listener import TcpListener
from tidegate.runtime.records import TimestampedBatch, timestamps_of, with_timestamps

log = logging.getLogger(__name__)


class LocalTransport:
    def __init__(self, gate: InputGate) -> None:
        self.gate = gate

    def send(self, channel: int, payload: Any) -> float:
        started = perf_counter()
        self.gate.put_data((channel, payload))
        return perf_counter() - started

    def send_typed(self, channel: int, batch: list, edge: TypedEdge) -> float:
        """A batch of a declared type: converted as a remote receiver would decode it, so a
        job sees the same records (and the same type errors) wherever its subtasks run."""
        try:
            converted = edge.codec.convert(batch)
        except RecordTypeError as e:
            raise edge.misfit(e) from None
        return self.send(channel, with_timestamps(converted, timestamps_of(batch)))

    def close(self) -> None:
        pass


class RemoteTransport:
    """Shared by the subtasks of one slot that send to the same (slot, vertex)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self._plain_pickle = True

    def send(self, channel: int, payload: Any) -> float:
        data, self._plain_pickle = encode_frame((channel, payload), self._plain_pickle)
        return self._send_bytes(data)

    def send_typed(self, channel: int, batch: list, edge: TypedEdge) -> float:
        return self._send_bytes(encode_typed_frame(channel, edge, batch))

    def _send_bytes(self, data: bytes) -> float:
        started = perf_counter()
        with self.lock:
            self.conn.send_bytes(data)
        return perf_counter() - started

    def close(self) -> None:
        shutdown_connection(self.conn)


class RecordWriter:
    """Output of a chain onto one edge: partitions batches into per-channel buffers and sends a
    buffer when it is full, on `flush`, and always before an event (events never overtake).

    Timestamped batches (runtime/records.py) are routed by `route_timestamped` into
    TimestampedBatch buffers; the buffers hold one kind at a time, so when the kind of the
    incoming batches changes, what is buffered is sent first. Watermarks and watermark status
    changes from the operator go downstream as events on every channel."""

    def __init__(
        self,
        channels: list[tuple[Any, int]],
        route: Callable[[list, list[list]], None],
        batch_size: int,
        route_timestamped: Callable[[list, list[int], list[list], list[list[int]]], None]
        | None = None,
        typed: TypedEdge | None = None,
    ) -> None:
        self.channels = channels  # (transport, channel index at the receiver)
        #: batches go out with the edge's codec (events are pickled, as on untyped edges)
        self.typed = typed
        self.route = route
        self.route_timestamped = route_timestamped
        self.batch_size = batch_size
        self.buffers: list[list] = [[] for _ in channels]
        #: the buffers are TimestampedBatch (timestamped records are buffered)
        self._timestamped = False
        self.records_out = 0
        #: (seconds blocked in completed sends, perf_counter() when the send in progress
        #: started, else None): one tuple, so the metrics thread reads a consistent pair
        self._blocked: tuple[float, float | None] = (0.0, None)
        self._reported_blocked_s = 0.0

    def process_batch(self, records: list) -> None:
        if type(records) is not list and timestamps_of(records) is not None:
            self._process_timestamped(records)
            return
        if self._timestamped:
            self._switch_kind(False)
        self.route(records, self.buffers)
        self.records_out += len(records)
        size = self.batch_size
        for i, buf in enumerate(self.buffers):
            if len(buf) >= size:
                self._send(i)

    def _process_timestamped(self, records: Any) -> None:
        if not self._timestamped:
            self._switch_kind(True)
        if self.route_timestamped is None:
            raise RuntimeError("this record writer was created without a timestamped route")
        buffers = self.buffers
        ts_buffers = [b.timestamps for b in buffers]
        self.route_timestamped(records, records.timestamps, buffers, ts_buffers)
        self.records_out += len(records)
        size = self.batch_size
        for i, buf in enumerate(buffers):
            if len(buf) >= size:
                self._send(i)

    def _switch_kind(self, timestamped: bool) -> None:
        self.flush()
        self._timestamped = timestamped
        self.buffers = [self._new_buffer() for _ in self.channels]

    def _new_buffer(self) -> list:
        return TimestampedBatch() if self._timestamped else []

    def process_watermark(self, watermark: int) -> None:
        self.broadcast_event(Watermark(watermark))

    def process_watermark_status(self, idle: bool) -> None:
        self.broadcast_event(WatermarkStatus(idle))

    def _send(self, i: int) -> None:
        buf = self.buffers[i]
        self.buffers[i] = self._new_buffer()
        transport, channel = self.channels[i]
        if self.typed is None:
            self._transmit(transport.send, channel, buf)
        else:
            self._transmit(transport.send_typed, channel, buf, self.typed)

    def flush(self) -> None:
        for i, buf in enumerate(self.buffers):
            if buf:
                self._send(i)

    def broadcast_event(self, event: Any) -> None:
        self.flush()
        for transport, channel in self.channels:
            self._transmit(transport.send, channel, event)

    def _transmit(self, send: Callable[..., float], *args: Any) -> None:
        done = self._blocked[0]
        self._blocked = (done, perf_counter())
        self._blocked = (done + send(*args), None)

    def backpressured_s(self, now: float) -> float:
        """Seconds blocked sending so far (`now`: perf_counter()), counting a send that is
        still blocked; never decreases. For the metrics thread."""
        done, since = self._blocked
        blocked = done if since is None else done + max(now - since, 0.0)
        self._reported_blocked_s = max(self._reported_blocked_s, blocked)
        return self._reported_blocked_s


class SlotNetwork:
    """The slot's data listener and its outgoing connections."""

    def __init__(
        self,
        slot: int,
        secret: bytes,
        bind_host: str,
        gates: dict[int, InputGate],
        typed_edges: Mapping[int, TypedEdge],
        silence_s: float,
    ):
        self.slot = slot
        #: the edges with a declared type, by id, to decode typed frames
        self.typed_edges = typed_edges
        self.secret = secret
        self.silence_s = silence_s
        self.gates = gates
        self.listener = TcpListener(bind_host, backlog=128)
        #: what this slot listens on; slot.py advertises it to peers via the driver
        self.address: tuple[str, int] = self.listener.address
        self._transports: dict[tuple[int, int], Any] = {}
        self._connections: list[Connection] = []
        self._closed = False
        self.error: BaseException | None = None
        threading.Thread(target=self._accept_loop, name="tidegate-accept", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn = self.listener.accept()
            except OSError:
                return
            if self._closed:
                conn.close()
                return
            self._connections.append(conn)
            bound_silence(conn, self.silence_s, control=False)
            threading.Thread(
                target=self._read_loop, args=(conn,), name="tidegate-recv", daemon=True
            ).start()

    def _read_loop(self, conn: Connection) -> None:
        try:
            authenticate_server(conn, self.secret)
        except (AuthenticationFailedError, OSError, EOFError) as e:
            if not self._closed:
                log.warning("slot %d refused a data connection: %s", self.slot, e)
            conn.close()
            return
        try:
            _src_slot, vertex = conn.recv()
            put = self.gates[vertex].put_data
            recv, edges = conn.recv_bytes, self.typed_edges
            while True:
                data = recv()
                frame, pickled = decode_frame(data, edges)
                put(frame, data if pickled else None)
        except (EOFError, OSError, TaskCancelledError):
            return
        except BaseException as e:  # undecodable frame: fail the slot rather than lose data
            self.error = e

    def transport(self, slot: int, vertex: int, addresses: dict[int, tuple[str, int]]):
        key = (slot, vertex)
        if key not in self._transports:
            if slot == self.slot:
                self._transports[key] = LocalTransport(self.gates[vertex])
            else:
                conn = connect(tuple(addresses[slot]), "peer", silence_s=self.silence_s)
                try:
                    authenticate_client(conn, self.secret)
                except BaseException:
                    conn.close()
                    raise
                conn.send((self.slot, vertex))
                self._transports[key] = RemoteTransport(conn)
        return self._transports[key]

    def remote_peers(self) -> list[tuple[int, int]]:
        """The (slot, vertex) of each outgoing connection to another slot, in order."""
        return sorted(
            k for k, t in list(self._transports.items()) if isinstance(t, RemoteTransport)
        )

    def drop_connection(self, peer: tuple[int, int]) -> None:
        """Shut down the outgoing connection to `peer` (slot, vertex) abruptly, as a failing
        network would (`tidegate chaos`'s `disconnect` fault, from a timer thread, never on the
        record path): the peer reads EOF, and the next send on it fails, which fails the
        subtask. The connection object stays open until `close`, so no send of another thread
        can write to a reused file descriptor."""
        shutdown_socket(self._transports[peer].conn)

    def close(self) -> None:
        self._closed = True
        # copies: a cancellation (another thread) may close while transports are created
        for t in list(self._transports.values()):
            t.close()
        for c in list(self._connections):
            shutdown_connection(c)
        self.listener.close()


def advertised_address(bound: tuple[str, int], reachable_host: str | None) -> tuple[str, int]:
    """The address peers should dial: the bound one, unless bound to a wildcard (all
    interfaces), which means nothing to a peer on another host; then `reachable_host` (the
    interface this process uses to reach the driver, or a configured host), else this host's
    address by its name."""
    host, port = bound[0], bound[1]
    if is_wildcard(host):
        host = reachable_host or _address_by_host_name(ipv6=is_ipv6(host))
    return host, port


def _address_by_host_name(ipv6: bool) -> str:
    """This host's address by its name: for an IPv6 wildcard its IPv6 address if it has one,
    else its IPv4 address (the `::` listener is dual-stack and accepts IPv4 too)."""
    infos = socket.getaddrinfo(
        socket.gethostname(), None, socket.AF_UNSPEC if ipv6 else socket.AF_INET
    )
    preferred = [i for i in infos if i[0] == socket.AF_INET6] if ipv6 else []
    return str((preferred or infos)[0][4][0])


def shutdown_connection(conn: Connection) -> None:
    """Close a connection so the peer sees EOF at once, even while a thread of ours is blocked
    reading it (a plain close() then sends no FIN)."""
    shutdown_socket(conn)
    conn.close()


def shutdown_socket(conn: Connection) -> None:
    """Shut down both directions of a connection's socket, leaving the connection open: the
    peer sees EOF, our reads see EOF and our sends fail."""
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()

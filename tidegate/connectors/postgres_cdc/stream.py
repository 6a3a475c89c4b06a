"""The change stream of a logical replication slot over the streaming replication protocol
(psycopg2's LogicalReplicationConnection: psycopg 3 does not speak it).

Why the protocol and not the SQL functions: `pg_logical_slot_peek_binary_changes` decodes the
WAL again from the slot's start at every call, and the slot may only move when a checkpoint
completed, so reading a checkpoint interval's changes in batches costs quadratic time;
`pg_logical_slot_get_binary_changes` consumes what it returns before the checkpoint holds it,
which loses changes on a failure. START_REPLICATION streams from any position the slot still
holds, once, and the slot moves only with the flush position we confirm.

Confirming: the source confirms a checkpoint's position once that checkpoint completed. It
confirms the position minus one byte: decoding restarts at the same transaction boundary
either way (a transaction is skipped when its commit record starts before the restart
point), and psycopg2 then never moves the slot on its own (it forwards the flush position to
the server's WAL end on keepalives once everything received is confirmed), so the slot's
confirmed LSN never passes a checkpointed position and a restore can check that nothing was
skipped (server.check_slot_holds).
"""

from __future__ import annotations

import select
import time

__all__ = ["ReplicationStream", "SlotInUse"]

#: how often the stream sends a status update (wal_sender_timeout is 60 s); each one lets the
#: server send its next keepalive, which tells how far it decoded (`wal_end`)
KEEPALIVE_S = 1.0


class SlotInUse(Exception):
    """Another connection streams the slot: the server's reply says which backend."""


class ReplicationStream:
    """START_REPLICATION of `slot` from `start_lsn`, pgoutput protocol 1 for `publication`."""

    def __init__(self, conninfo: str, slot: str, publication: str, start_lsn: int) -> None:
        try:
            import psycopg2
            import psycopg2.errors
            import psycopg2.extras
        except ImportError:
            raise ImportError(
                "the PostgreSQL CDC source reads the replication stream with psycopg2: "
                "pip install 'tidegate[postgres]'"
            ) from None

        self._conn = psycopg2.connect(
            conninfo, connection_factory=psycopg2.extras.LogicalReplicationConnection
        )
        self._cursor = self._conn.cursor()
        try:
            self._cursor.start_replication(
                slot_name=slot,
                decode=False,
                start_lsn=start_lsn,
                options={"proto_version": "1", "publication_names": publication},
            )
        except psycopg2.errors.ObjectInUse as e:
            self._conn.close()
            raise SlotInUse(str(e).strip()) from None
        self._last_feedback = time.monotonic()

    def read(self, timeout_s: float) -> bytes | None:
        """The next message's payload, waiting at most `timeout_s` for one (None: none came)."""
        message = self._cursor.read_message()
        if message is None and timeout_s > 0:
            select.select([self._conn], [], [], timeout_s)
            message = self._cursor.read_message()
        return None if message is None else message.payload

    @property
    def wal_end(self) -> int:
        """How far the server decoded the WAL, as of the last message or keepalive received:
        every transaction that committed before it was sent before that message."""
        return self._cursor.wal_end

    def confirm(self, lsn: int) -> None:
        """Let the slot forget everything before `lsn`, a checkpointed restart position."""
        self._cursor.send_feedback(flush_lsn=lsn - 1, force=True)
        self._last_feedback = time.monotonic()

    def keep_alive(self) -> None:
        """Send a status update if none was sent for KEEPALIVE_S."""
        if time.monotonic() - self._last_feedback > KEEPALIVE_S:
            self._cursor.send_feedback(force=True)
            self._last_feedback = time.monotonic()

    def close(self) -> None:
        self._conn.close()

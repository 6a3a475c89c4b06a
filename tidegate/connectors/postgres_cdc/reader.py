"""The reader of the PostgresSource's one split: the snapshot chunk by chunk, then the change
stream, as `Row`s with their RowKind.

When each method is called and what it guarantees:

* `__init__` (when the source subtask that holds the split starts): checks the server and the
  tables; on a first run finds or creates the publication and the slot (the stream's start);
  after a restore checks that the slot still holds everything after the checkpointed position.
* `poll_batch` (loop thread, between checkpoints): while the snapshot is not complete, the
  next rows of the current table's chunk (at most `max_records`, all +I); then the changes
  the stream delivers within ~50 ms, without the ones the snapshot already holds (handoff.py).
  A transaction's changes may span batches: the position counts the transaction's change
  messages emitted so far.
* `snapshot_splits` (a checkpoint's synchronous phase): the split with the chunks read and the
  stream position just after the last record returned.
* `notify_checkpoint_complete` (that checkpoint completed): confirms its position to the slot,
  the only time the slot moves, so the server keeps everything a restore may need.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from tidegate.common.types import Row, RowKind, rows_of
from tidegate.connectors.base import Boundedness
from tidegate.connectors.postgres_cdc.handoff import Chunk, TableSnapshot, XidSnapshot
from tidegate.connectors.postgres_cdc.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    Relation,
    Truncate,
    Update,
    decode,
)
from tidegate.connectors.postgres_cdc.server import (
    PostgresCdcError,
    TableInfo,
    check_server,
    check_slot_holds,
    ensure_publication,
    ensure_slot,
    read_table,
)
from tidegate.connectors.postgres_cdc.snapshot import TableDecoder, read_chunk
from tidegate.connectors.postgres_cdc.split import PostgresCdcSplit, StreamPosition
from tidegate.connectors.postgres_cdc.stream import ReplicationStream, SlotInUse

if TYPE_CHECKING:
    from tidegate.connectors.postgres_cdc.source import PostgresSource

__all__ = ["PostgresCdcReader"]

log = logging.getLogger(__name__)

#: how long one poll waits for the stream (SourceReader.poll_batch: at most ~50 ms)
POLL_WAIT_S = 0.04
#: how long the slot may stay in use by another connection (a failed attempt's, until the
#: server notices it is gone: at most wal_sender_timeout, 60 s by default) before the reader
#: fails, and how often it tries again meanwhile
SLOT_BUSY_S = 70.0
SLOT_RETRY_S = 0.5


def make_row(kind: RowKind, names: list[str], values: list[Any]) -> Row:
    return rows_of((values,), names, [kind])[0]


class _Captured:
    """A captured table as the stream currently describes it (its last Relation message)."""

    __slots__ = ("decoder", "name", "snapshot")

    def __init__(self, decoder: TableDecoder, snapshot: TableSnapshot) -> None:
        self.decoder = decoder
        self.name = decoder.table.qualified
        self.snapshot = snapshot

    def emits(self, values: list[Any], xid: int) -> bool:
        """Whether a change image is new to the snapshot (handoff.py)."""
        return not self.snapshot.holds(self.decoder.key(values), xid)


class PostgresCdcReader:
    def __init__(self, source: PostgresSource, splits: list[PostgresCdcSplit]) -> None:
        if len(splits) > 1:
            raise ValueError(f"a PostgresSource has one split, this reader got {len(splits)}")
        self._source = source
        self._split = splits[0] if splits else None
        self._conn: Any = None
        self._stream: ReplicationStream | None = None
        self._relations: dict[int, _Captured | None] = {}
        self._txn: Begin | None = None
        self._txn_changes = 0
        #: the restored mid-transaction position, until its transaction is reached
        self._resume: StreamPosition | None = None
        self._retry_at = 0.0
        self._busy_since: float | None = None
        #: the snapshot chunk being emitted: its rows not emitted yet, its MVCC snapshot, and
        #: whether it ends its table
        self._chunk: tuple[list[list[Any]], XidSnapshot, bool] | None = None
        if self._split is not None:
            self._open(self._split)

    def _open(self, split: PostgresCdcSplit) -> None:
        source = self._source
        if split.tables != source.tables:
            raise PostgresCdcError(
                f"the restored checkpoint captured tables {list(split.tables)}, this source "
                f"captures {list(source.tables)}: a restore cannot add or drop tables; start "
                "the job without restoring, with a new slot_name (a new snapshot)"
            )
        self._conn = conn = source.connect()
        check_server(conn)
        self._tables: dict[str, TableInfo] = {t: read_table(conn, t) for t in split.tables}
        self._snapshots = list(split.snapshots)
        self._decoders = {name: TableDecoder(t) for name, t in self._tables.items()}
        if source.boundedness is Boundedness.BOUNDED:
            return  # the snapshot alone: no publication, slot or position
        ensure_publication(conn, source.publication_name, list(self._tables.values()))
        if split.position is None:
            position = StreamPosition(ensure_slot(conn, source.slot_name))
        else:
            position = split.position
            check_slot_holds(conn, source.slot_name, position.lsn)
            if position.txn_lsn is not None:
                self._resume = position
        self._lsn = self._confirmed = position.lsn

    # reading -----------------------------------------------------------------------------------
    def poll_batch(self, max_records: int) -> list[Any] | None:
        if self._split is None:
            return None
        if not self._snapshot_done():
            return self._poll_snapshot(max_records)
        if self._source.boundedness is Boundedness.BOUNDED:
            return None
        return self._poll_stream(max_records)

    def _snapshot_done(self) -> bool:
        return len(self._snapshots) == len(self._tables) and self._snapshots[-1].complete

    def _poll_snapshot(self, max_records: int) -> list[Any]:
        """Up to `max_records` rows of the current chunk (read when none is left), recorded in
        the table's snapshot up to the last key emitted: a checkpoint in the middle of a chunk
        keeps the rows emitted with their MVCC snapshot, and a restore reads on after them."""
        if not self._snapshots or self._snapshots[-1].complete:
            self._snapshots.append(TableSnapshot())
        i = len(self._snapshots) - 1
        table, name = self._snapshots[i], self._split.tables[i]
        decoder = self._decoders[name]
        if self._chunk is None:
            self._chunk = read_chunk(self._conn, decoder, table.after, self._source.split_size)
        rows, snapshot, ends_table = self._chunk
        emitted, rest = rows[:max_records], rows[max_records:]
        if rest:
            self._chunk = (rest, snapshot, ends_table)
        else:
            self._chunk = None
        upper = None if not rest and ends_table else decoder.key(emitted[-1])
        self._snapshots[i] = table.add(Chunk(upper, snapshot))
        out = self._source.deserializer
        return [out(name, row) for row in rows_of(emitted, decoder.names, None)]

    def _poll_stream(self, max_records: int) -> list[Any]:
        if self._stream is None:
            self._stream = self._open_stream()
            if self._stream is None:
                return []
        out: list[Any] = []
        deadline = time.monotonic() + POLL_WAIT_S
        while len(out) < max_records:
            payload = self._stream.read(deadline - time.monotonic())
            if payload is None:
                self._skip_idle_wal()
                break
            self._apply(decode(payload), out)
        self._stream.keep_alive()
        return out

    def _skip_idle_wal(self) -> None:
        """With every message received and no transaction open, the position moves to how far
        the server decoded: the transactions that committed before that point were all sent
        (and applied), so a restart there skips nothing, and the slot (confirmed at the next
        checkpoint) need not keep the WAL that other tables' changes fill meanwhile."""
        if self._txn is None and self._resume is None:
            self._lsn = max(self._lsn, self._stream.wal_end)

    def _open_stream(self) -> ReplicationStream | None:
        """The stream from the split's position; None while the slot is still streamed to a
        connection of a failed attempt (the server ends it when it notices that the client
        is gone), retried for up to SLOT_BUSY_S before failing."""
        if time.monotonic() < self._retry_at:
            return None
        source = self._source
        try:
            stream = ReplicationStream(
                source.conninfo, source.slot_name, source.publication_name, self._lsn
            )
        except SlotInUse as e:
            now = time.monotonic()
            self._busy_since = self._busy_since or now
            if now - self._busy_since > SLOT_BUSY_S:
                raise PostgresCdcError(
                    f"replication slot {source.slot_name!r} has been in use by another "
                    f"connection for {SLOT_BUSY_S:g} s ({e}): is another job reading it? "
                    "Each job needs a slot of its own (slot_name)"
                ) from None
            self._retry_at = now + SLOT_RETRY_S
            return None
        if self._conn is not None:
            self._conn.close()  # the snapshot's connection
            self._conn = None
        return stream

    def _apply(self, message: Any, out: list[Any]) -> None:
        if isinstance(message, Begin):
            self._txn, self._txn_changes = message, 0
        elif isinstance(message, Commit):
            self._txn = self._resume = None  # the first transaction streamed is the resumed one
            self._lsn = message.end_lsn
        elif isinstance(message, Relation):
            self._relations[message.oid] = self._captured(message)
        elif message is not None:
            self._txn_changes += 1
            txn = self._txn
            assert txn is not None, "a change outside a transaction"
            resume = self._resume
            if (
                resume is not None
                and resume.txn_lsn == txn.final_lsn
                and self._txn_changes <= resume.txn_changes
            ):
                return  # emitted before the checkpoint this attempt restored
            self._change(message, txn.xid, out)

    def _captured(self, relation: Relation) -> _Captured | None:
        name = f"{relation.namespace}.{relation.name}"
        table = self._tables.get(name)
        if table is None:
            return None  # published, but not captured by this source
        names = [c.name for c in relation.columns]
        key_names = [table.columns[i].name for i in table.key]
        missing = [k for k in key_names if k not in names]
        if missing:
            raise PostgresCdcError(f"table {name} lost its primary key columns {missing}")
        shape = TableInfo(
            table.schema, table.name, relation.columns, tuple(names.index(k) for k in key_names)
        )
        return _Captured(TableDecoder(shape), self._snapshots[self._split.tables.index(name)])

    def _change(self, message: Any, xid: int, out: list[Any]) -> None:
        if isinstance(message, Truncate):
            names = [c.name for oid in message.relation_oids if (c := self._relations.get(oid))]
            if names:
                log.warning("TRUNCATE of %s is not captured (no rows are emitted for it)", names)
            return
        table = self._relations.get(message.relation_oid)
        if table is None:
            return
        decoder, emit = table.decoder, self._source.deserializer
        if isinstance(message, Insert):
            new = decoder.values(message.new)
            if table.emits(new, xid):
                out.append(emit(table.name, make_row(RowKind.INSERT, decoder.names, new)))
            return
        if message.old is None or message.old_is_key_only or UNCHANGED in message.old:
            raise PostgresCdcError(
                f"a change of table {table.name} came without its whole old row: run "
                f"ALTER TABLE {table.name} REPLICA IDENTITY FULL"
            )
        old = decoder.values(message.old)
        if isinstance(message, Delete):
            if table.emits(old, xid):
                out.append(emit(table.name, make_row(RowKind.DELETE, decoder.names, old)))
            return
        assert isinstance(message, Update)
        pairs = zip(message.new, message.old, strict=True)
        texts = tuple(o if n is UNCHANGED else n for n, o in pairs)
        new = decoder.values(texts)
        if table.emits(old, xid):
            out.append(emit(table.name, make_row(RowKind.UPDATE_BEFORE, decoder.names, old)))
        if table.emits(new, xid):
            out.append(emit(table.name, make_row(RowKind.UPDATE_AFTER, decoder.names, new)))

    # checkpoints -------------------------------------------------------------------------------
    def snapshot_splits(self) -> list[PostgresCdcSplit]:
        if self._split is None:
            return []
        if self._source.boundedness is Boundedness.BOUNDED:
            return [PostgresCdcSplit(self._split.tables, tuple(self._snapshots))]
        if self._txn is not None:
            done = self._txn_changes
            resume = self._resume
            if resume is not None and resume.txn_lsn == self._txn.final_lsn:
                done = max(done, resume.txn_changes)
            position = StreamPosition(self._lsn, self._txn.final_lsn, done)
        else:
            position = self._resume or StreamPosition(self._lsn)
        return [PostgresCdcSplit(self._split.tables, tuple(self._snapshots), position)]

    def notify_checkpoint_complete(self, checkpoint_id: int, splits: list[Any]) -> None:
        for split in splits:
            lsn = split.position.lsn
            if self._stream is not None and lsn > self._confirmed:
                self._stream.confirm(lsn)
                self._confirmed = lsn

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        if self._conn is not None:
            self._conn.close()

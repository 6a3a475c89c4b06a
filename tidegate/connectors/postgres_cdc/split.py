"""The one split of a PostgresSource: the snapshot's progress and the stream's position, all
of the source's exactly-once state (checkpointed as operator list state)."""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.connectors.postgres_cdc.handoff import TableSnapshot

__all__ = ["PostgresCdcSplit", "StreamPosition", "format_lsn", "parse_lsn"]


def parse_lsn(text: str) -> int:
    """`16/B374D848` (PostgreSQL's pg_lsn text) as an integer."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """Where the change stream resumes: decoding restarts at `lsn` (the end of the last
    transaction emitted completely, or the slot's start), and if `txn_lsn` is set, the first
    `txn_changes` change messages of the transaction that commits at `txn_lsn` (the next one
    in commit order) were emitted already."""

    lsn: int
    txn_lsn: int | None = None
    txn_changes: int = 0


@dataclass(frozen=True, slots=True)
class PostgresCdcSplit:
    """`tables` (qualified `schema.table` names) in snapshot order with what was read of each
    (`snapshots`, one per table; complete ones first); `position` is None until the reader
    that first gets the split found or created the replication slot."""

    tables: tuple[str, ...]
    snapshots: tuple[TableSnapshot, ...] = ()  # or NO_SNAPSHOT for a table not snapshotted
    position: StreamPosition | None = None

    @property
    def snapshot_done(self) -> bool:
        return len(self.snapshots) == len(self.tables) and all(s.complete for s in self.snapshots)

    def __str__(self) -> str:
        done = sum(s.complete for s in self.snapshots)
        where = "no slot yet" if self.position is None else format_lsn(self.position.lsn)
        return (
            f"postgres-cdc split: {done}/{len(self.tables)} tables snapshotted, stream at {where}"
        )

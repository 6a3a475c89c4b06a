"""Which changes of the replication stream the snapshot already holds: the exact handoff
between the snapshot phase and the stream phase (pure logic; the reader does the I/O).

The snapshot reads each table in key-ordered chunks, each chunk in its own REPEATABLE READ
transaction whose MVCC snapshot (`pg_current_snapshot()`: xmin, xmax and the transactions in
progress) is kept with the chunk (the key range of the rows emitted so far, when a
checkpoint comes while a chunk's rows are still being emitted). A chunk holds exactly the
effects of the transactions visible in its snapshot (MVCC's definition of visibility), for
the keys in its range. The
stream is read from the replication slot, which was created (or found) before the first
chunk, so it holds every transaction that committed after that point. A change of
transaction `xid` to key `k` of table `t` is therefore already in the snapshot exactly when
`xid` is visible in the snapshot of the chunk of `t` whose range holds `k`: such changes are
dropped, all others are emitted. Nothing is lost (a transaction not visible in a chunk's
snapshot committed after it, hence after the slot's start) and nothing is doubled.

This plays the role of Flink CDC's incremental snapshot algorithm (low/high watermark LSNs
and a backfill of each chunk), with the transaction's visibility instead of LSN bounds: a
transaction's commit LSN and its visibility are not ordered the same way in PostgreSQL
(a commit record is written before the transaction leaves the proc array), so an LSN bound
taken next to a snapshot can be off by a transaction, while visibility is exact. Chunks
may use different snapshots, so a failure in the middle of the snapshot phase resumes with
the next chunk and a new snapshot; the chunks already read keep theirs in the checkpoint.

An UPDATE that moves a row from one chunk to another is judged per image: the -U by the
chunk of the old key, the +U by the chunk of the new key.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

__all__ = ["NO_SNAPSHOT", "Chunk", "TableSnapshot", "XidSnapshot"]

_EPOCH = 1 << 32
_HALF = 1 << 31


@dataclass(frozen=True, slots=True)
class XidSnapshot:
    """An MVCC snapshot: 64-bit transaction ids below `xmin` are finished, those from `xmax` on
    not yet started, and those in `in_progress` were running when it was taken."""

    xmin: int
    xmax: int
    in_progress: frozenset[int] = frozenset()

    @staticmethod
    def parse(text: str) -> XidSnapshot:
        """`pg_current_snapshot()::text`, e.g. `745:749:745,747`."""
        xmin, xmax, xip = text.split(":")
        running = frozenset(int(x) for x in xip.split(",") if x)
        return XidSnapshot(int(xmin), int(xmax), running)

    def full_xid(self, xid: int) -> int:
        """The 64-bit id of the 32-bit `xid` a pgoutput Begin carries: the one within 2^31 of
        this snapshot's xmax (PostgreSQL keeps live transaction ids within that distance)."""
        delta = (xid - self.xmax) % _EPOCH
        if delta >= _HALF:
            delta -= _EPOCH
        return self.xmax + delta

    def sees(self, xid: int) -> bool:
        """Whether the committed transaction `xid` (32-bit) is visible in this snapshot."""
        full = self.full_xid(xid)
        return full < self.xmin or (full < self.xmax and full not in self.in_progress)


@dataclass(frozen=True, slots=True)
class Chunk:
    """The keys of a table above the previous chunk's `upper` up to this `upper` (inclusive;
    None: no upper bound, the table's last chunk), read in `snapshot`."""

    upper: tuple[Any, ...] | None
    snapshot: XidSnapshot


def _upper(chunk: Chunk) -> tuple[Any, ...] | None:
    return chunk.upper


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """The chunks read of one table, in key order; `complete` once the last one is read."""

    chunks: tuple[Chunk, ...] = ()

    @property
    def complete(self) -> bool:
        return bool(self.chunks) and self.chunks[-1].upper is None

    @property
    def after(self) -> tuple[Any, ...] | None:
        """The key the next chunk starts after (None: from the first key)."""
        return self.chunks[-1].upper if self.chunks else None

    def add(self, chunk: Chunk) -> TableSnapshot:
        """With `chunk`, the rows emitted next. A chunk in the same snapshot as the last one
        extends it (the rows of one read, emitted over several batches, stay one chunk)."""
        if self.complete:
            raise ValueError("the table's snapshot is complete: no chunk follows its last")
        if self.chunks and self.chunks[-1].snapshot == chunk.snapshot:
            return TableSnapshot((*self.chunks[:-1], chunk))
        return TableSnapshot((*self.chunks, chunk))

    def holds(self, key: tuple[Any, ...], xid: int) -> bool:
        """Whether the change of transaction `xid` to `key` is already in this (complete)
        snapshot."""
        i = bisect_left(self.chunks, key, hi=len(self.chunks) - 1, key=_upper)
        return self.chunks[i].snapshot.sees(xid)


@dataclass(frozen=True, slots=True)
class _NoSnapshot:
    """A table not snapshotted (startup from the latest offset): it holds no change."""

    complete: bool = True

    def holds(self, key: tuple[Any, ...], xid: int) -> bool:
        return False


NO_SNAPSHOT: Any = _NoSnapshot()

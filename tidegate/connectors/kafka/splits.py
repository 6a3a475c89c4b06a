"""Kafka partitions as source splits, and which subtask reads which: pure functions.

A partition's split is read by exactly one source subtask, chosen by `split_owner` from the
topic, the partition and the parallelism alone. Every subtask computes the same answer without
talking to the others, which is what makes partition discovery safe: a subtask that finds a
partition it owns and that no restored split names knows no other subtask reads it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["KafkaPartitionSplit", "assign_splits", "new_partitions", "split_owner"]


@dataclass(frozen=True, slots=True)
class KafkaPartitionSplit:
    """One partition and the reader's position in it.

    `offset` is the next offset to read (None until the owning reader resolved the starting
    offset; `start_earliest` then says a discovered partition starts at its earliest offset
    instead of the source's starting offsets). `stopping_offset` ends a bounded split (the
    split is finished once `offset >= stopping_offset`); None means unbounded, or, in a bounded
    source, not resolved yet. `skip_before_timestamp`: records older than it are skipped until
    the first one at or after it (a timestamp starting offset; see offsets.py).
    """

    topic: str
    partition: int
    offset: int | None = None
    stopping_offset: int | None = None
    skip_before_timestamp: int | None = None
    start_earliest: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def finished(self) -> bool:
        return (
            self.offset is not None
            and self.stopping_offset is not None
            and self.offset >= self.stopping_offset
        )


def split_owner(topic: str, partition: int, parallelism: int) -> int:
    """The subtask reading `topic`'s `partition`: consecutive partitions of a topic go to
    consecutive subtasks, from a start that depends on the topic (a stable CRC32 of its name,
    so topics with few partitions do not all land on subtask 0)."""
    if parallelism < 1 or partition < 0:
        raise ValueError(f"need parallelism >= 1 and partition >= 0: {parallelism}, {partition}")
    start = zlib.crc32(topic.encode()) % parallelism
    return (start + partition) % parallelism


def assign_splits(
    splits: Iterable[KafkaPartitionSplit], subtask_index: int, parallelism: int
) -> list[KafkaPartitionSplit]:
    """The splits `subtask_index` reads out of all splits (first run or restored, any earlier
    parallelism), each partition once, in (topic, partition) order."""
    mine = {
        s.key: s for s in splits if split_owner(s.topic, s.partition, parallelism) == subtask_index
    }
    return [mine[key] for key in sorted(mine)]


def new_partitions(
    found: Iterable[tuple[str, int]],
    known: set[tuple[str, int]],
    subtask_index: int,
    parallelism: int,
) -> list[tuple[str, int]]:
    """Partitions of `found` that `subtask_index` owns and that are not `known` (no split of
    the restored state or of this reader names them), sorted."""
    return sorted(
        {
            tp
            for tp in found
            if tp not in known and split_owner(tp[0], tp[1], parallelism) == subtask_index
        }
    )

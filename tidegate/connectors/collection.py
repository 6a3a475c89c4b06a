"""A bounded source over an in-memory list (what `env.from_collection` builds on)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tidegate.connectors.base import Boundedness

__all__ = ["CollectionReader", "CollectionSource", "CollectionSplit"]


@dataclass(frozen=True, slots=True)
class CollectionSplit:
    """The position `index` of the next element to emit from the source's element list."""

    split_id: str
    index: int


class CollectionSource:
    """Emits a copy of `elements` in order, from a single split.

    Whatever the parallelism, there is one split: subtask 0 reads the whole collection and the
    readers of other subtasks, holding no split, finish at once.
    """

    boundedness = Boundedness.BOUNDED

    def __init__(self, elements: Iterable[Any]) -> None:
        self.elements: tuple[Any, ...] = tuple(elements)

    def create_splits(self, parallelism: int) -> list[CollectionSplit]:
        if parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {parallelism}")
        return [CollectionSplit("0", 0)]

    def create_reader(
        self, splits: list[CollectionSplit], subtask_index: int, parallelism: int
    ) -> CollectionReader:
        return CollectionReader(self.elements, splits)


class CollectionReader:
    def __init__(self, elements: tuple[Any, ...], splits: list[CollectionSplit]) -> None:
        if len(splits) > 1:
            raise ValueError(f"a collection source has one split, got {len(splits)}: {splits}")
        self._elements = elements
        self._split = splits[0] if splits and splits[0].index < len(elements) else None

    def poll_batch(self, max_records: int) -> list[Any] | None:
        split = self._split
        if split is None:
            return None
        stop = min(split.index + max(max_records, 0), len(self._elements))
        batch = list(self._elements[split.index : stop])
        self._split = CollectionSplit(split.split_id, stop) if stop < len(self._elements) else None
        return batch

    def snapshot_splits(self) -> list[CollectionSplit]:
        return [] if self._split is None else [self._split]

    def close(self) -> None:
        self._split = None

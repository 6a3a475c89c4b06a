"""A bounded source of the integers `start..end` (inclusive), like Flink's NumberSequenceSource."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from tidegate.connectors.base import Boundedness

__all__ = ["NumberSequenceReader", "NumberSequenceSource", "NumberSequenceSplit"]


@dataclass(frozen=True, slots=True)
class NumberSequenceSplit:
    """The numbers `next_value..end` (inclusive) still to emit; empty once `next_value > end`."""

    split_id: str
    next_value: int
    end: int

    @property
    def remaining(self) -> int:
        return max(0, self.end - self.next_value + 1)


def split_range(start: int, end: int, num_splits: int) -> list[tuple[int, int]]:
    """Cut `start..end` (inclusive) into at most `num_splits` contiguous, near-equal ranges.

    The first `total % n` ranges hold one number more than the others.
    """
    total = end - start + 1
    if total <= 0:
        return []
    n = min(num_splits, total)
    size, extra = divmod(total, n)
    ranges, low = [], start
    for i in range(n):
        high = low + size + (1 if i < extra else 0) - 1
        ranges.append((low, high))
        low = high + 1
    return ranges


class NumberSequenceSource:
    """Emits every integer from `start` to `end` (both inclusive) exactly once.

    Splits are contiguous ranges, one per subtask (fewer when the range is shorter than the
    parallelism); a reader emits its ranges in order.
    """

    boundedness = Boundedness.BOUNDED

    def __init__(self, start: int, end: int) -> None:
        if start > end:
            raise ValueError(f"start ({start}) must be <= end ({end})")
        self.start = start
        self.end = end

    def create_splits(self, parallelism: int) -> list[NumberSequenceSplit]:
        if parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {parallelism}")
        return [
            NumberSequenceSplit(str(i), low, high)
            for i, (low, high) in enumerate(split_range(self.start, self.end, parallelism))
        ]

    def create_reader(
        self, splits: list[NumberSequenceSplit], subtask_index: int, parallelism: int
    ) -> NumberSequenceReader:
        return NumberSequenceReader(splits)

    def __repr__(self) -> str:
        return f"NumberSequenceSource({self.start}, {self.end})"


class NumberSequenceReader:
    """Emits its splits one after another, each as batches of `list(range(...))`."""

    def __init__(self, splits: list[NumberSequenceSplit]) -> None:
        self._splits = deque(s for s in splits if s.remaining)

    def poll_batch(self, max_records: int) -> list[int] | None:
        if not self._splits:
            return None
        split = self._splits[0]
        stop = min(split.next_value + max(max_records, 0), split.end + 1)
        batch = list(range(split.next_value, stop))
        if stop > split.end:
            self._splits.popleft()
        else:
            self._splits[0] = replace(split, next_value=stop)
        return batch

    def snapshot_splits(self) -> list[NumberSequenceSplit]:
        return list(self._splits)

    def close(self) -> None:
        self._splits.clear()

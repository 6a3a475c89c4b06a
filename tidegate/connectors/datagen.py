"""A source that maps indices to records with a user function, like Flink's DataGeneratorSource."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from tidegate.connectors.base import Boundedness
from tidegate.connectors.number_seq import split_range

__all__ = ["DataGeneratorReader", "DataGeneratorSource", "DataGeneratorSplit", "RateLimiter"]

T = TypeVar("T")

#: the longest a reader sleeps in one poll while waiting for the rate limiter
MAX_THROTTLE_SLEEP_S = 0.05


@dataclass(frozen=True, slots=True)
class DataGeneratorSplit:
    """The indices `next_index, next_index + stride, ...` still to generate, below `stop`.

    Bounded sources plan contiguous ranges (`stride == 1`, `stop` exclusive). Unbounded sources
    plan one split per subtask: split `i` of `p` generates `i, i + p, i + 2p, ...` (`stop` is None).
    A split is fully described by these fields, so restoring it (with any parallelism) resumes
    at exactly the next index it had not generated yet.
    """

    split_id: str
    next_index: int
    stop: int | None
    stride: int = 1

    @property
    def exhausted(self) -> bool:
        return self.stop is not None and self.next_index >= self.stop


class RateLimiter:
    """A token bucket of `rate` permits per second holding at most one second's worth.

    It starts with one permit so the first record is not delayed. `clock` and `sleep` are
    injectable for tests.
    """

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate = rate
        self._capacity = max(1.0, rate)
        self._tokens = 1.0
        self._clock = clock
        self._sleep = sleep
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def acquire_up_to(self, wanted: int) -> int:
        """Take between 0 and `wanted` permits; sleeps at most `MAX_THROTTLE_SLEEP_S`."""
        self._refill()
        if self._tokens < 1.0 and wanted > 0:
            self._sleep(min((1.0 - self._tokens) / self.rate, MAX_THROTTLE_SLEEP_S))
            self._refill()
        granted = min(wanted, int(self._tokens))
        self._tokens -= granted
        return granted


class DataGeneratorSource(Generic[T]):
    """Emits `generator_function(index)` for indices `0..count-1` (`count=None`: unbounded).

    `records_per_second` limits the whole source; every reader gets an equal share of it.
    """

    def __init__(
        self,
        generator_function: Callable[[int], T],
        count: int | None = None,
        records_per_second: float | None = None,
    ) -> None:
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0 or None, got {count}")
        if records_per_second is not None and records_per_second <= 0:
            raise ValueError(f"records_per_second must be > 0, got {records_per_second}")
        self.generator_function = generator_function
        self.count = count
        self.records_per_second = records_per_second
        self.boundedness = (
            Boundedness.CONTINUOUS_UNBOUNDED if count is None else Boundedness.BOUNDED
        )

    def create_splits(self, parallelism: int) -> list[DataGeneratorSplit]:
        if parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {parallelism}")
        if self.count is None:
            return [DataGeneratorSplit(str(i), i, None, parallelism) for i in range(parallelism)]
        return [
            DataGeneratorSplit(str(i), low, high + 1)
            for i, (low, high) in enumerate(split_range(0, self.count - 1, parallelism))
        ]

    def create_reader(
        self, splits: list[DataGeneratorSplit], subtask_index: int, parallelism: int
    ) -> DataGeneratorReader[T]:
        limiter = None
        if self.records_per_second is not None:
            limiter = RateLimiter(self.records_per_second / max(parallelism, 1))
        return DataGeneratorReader(self.generator_function, splits, limiter)


class DataGeneratorReader(Generic[T]):
    """Generates its bounded splits one after another; unbounded splits take turns per batch."""

    def __init__(
        self,
        generator_function: Callable[[int], T],
        splits: list[DataGeneratorSplit],
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self._fn = generator_function
        self._splits = deque(s for s in splits if not s.exhausted)
        self.rate_limiter = rate_limiter

    def poll_batch(self, max_records: int) -> list[T] | None:
        if not self._splits:
            return None
        split = self._splits[0]
        step = split.stride
        wanted = max(max_records, 0)
        if split.stop is not None:
            wanted = min(wanted, len(range(split.next_index, split.stop, step)))
        if self.rate_limiter is not None:
            wanted = self.rate_limiter.acquire_up_to(wanted)
        indices = range(split.next_index, split.next_index + wanted * step, step)
        batch = [self._fn(i) for i in indices]
        next_index = split.next_index + len(indices) * step
        done = split.stop is not None and next_index >= split.stop
        if done:
            self._splits.popleft()
        else:
            self._splits[0] = replace(split, next_index=next_index)
            if split.stop is None:
                self._splits.rotate(-1)  # endless splits take turns, or the others starve
        return batch

    def snapshot_splits(self) -> list[DataGeneratorSplit]:
        return list(self._splits)

    def close(self) -> None:
        self._splits.clear()

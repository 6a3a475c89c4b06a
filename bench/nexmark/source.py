"""`NexmarkSource`: the generator as a replayable tidegate Source.

Splits are `DataGeneratorSplit`s (tidegate/connectors/datagen.py) over event numbers: split
`i` of `p` generates events `i, i + p, i + 2p, ...` (below `count`, or forever), so every
subtask's events advance through event time together, as the reference generator's parallel
instances do, and each subtask's events are in timestamp order. A split's position is the next
event number; it lives in operator state, so a restore resumes at exactly the next event, and
the events are a pure function of their number (and the config), so a replay regenerates them
identically.
"""

from __future__ import annotations

from dataclasses import replace

from bench.nexmark.generator import NexmarkConfig, NexmarkGenerator
from bench.nexmark.model import Auction, Bid, Person
from tidegate.connectors.base import Boundedness
from tidegate.connectors.datagen import DataGeneratorSplit, RateLimiter

__all__ = ["NexmarkReader", "NexmarkSource"]


class NexmarkSource:
    """Nexmark events `0..count-1` (`count=None`: unbounded).

    `records_per_second` throttles the whole source in wall-clock time (every reader gets an
    equal share); None runs as fast as possible. Event time follows `config.first_event_rate`
    (by default `records_per_second` when it is given, else the Nexmark default of 10 000).
    """

    def __init__(
        self,
        count: int | None = None,
        records_per_second: float | None = None,
        config: NexmarkConfig | None = None,
    ) -> None:
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0 or None (unbounded), got {count}")
        if records_per_second is not None and records_per_second <= 0:
            raise ValueError(f"records_per_second must be > 0 or None, got {records_per_second}")
        if config is None:
            rate = int(records_per_second) if records_per_second else 10_000
            config = NexmarkConfig(first_event_rate=max(rate, 1))
        self.count = count
        self.records_per_second = records_per_second
        self.config = config
        self.boundedness = (
            Boundedness.CONTINUOUS_UNBOUNDED if count is None else Boundedness.BOUNDED
        )

    def create_splits(self, parallelism: int) -> list[DataGeneratorSplit]:
        if parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {parallelism}")
        return [DataGeneratorSplit(str(i), i, self.count, parallelism) for i in range(parallelism)]

    def create_reader(
        self, splits: list[DataGeneratorSplit], subtask_index: int, parallelism: int
    ) -> NexmarkReader:
        limiter = None
        if self.records_per_second is not None:
            limiter = RateLimiter(self.records_per_second / max(parallelism, 1))
        return NexmarkReader(NexmarkGenerator(self.config), splits, limiter)


class NexmarkReader:
    """Generates its splits in event-number order, so its output is in timestamp order (the
    monotonous watermarks hold) even when a restore with a lower parallelism gave it several
    splits at different positions: it always continues the split that is furthest behind, and
    only up to the next split's position."""

    def __init__(
        self,
        generator: NexmarkGenerator,
        splits: list[DataGeneratorSplit],
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self._generator = generator
        self._splits = [s for s in splits if not s.exhausted]
        self.rate_limiter = rate_limiter

    def poll_batch(self, max_records: int) -> list[Person | Auction | Bid] | None:
        splits = self._splits
        if not splits:
            return None
        k = min(range(len(splits)), key=lambda i: splits[i].next_index)
        split = splits[k]
        first, stride = split.next_index, split.stride
        wanted = max(max_records, 0)
        if split.stop is not None:
            wanted = min(wanted, len(range(first, split.stop, stride)))
        if len(splits) > 1:  # not past the next split's position (at least one event)
            following = min(s.next_index for s in splits if s is not split)
            wanted = min(wanted, len(range(first, following, stride)))
        if self.rate_limiter is not None:
            wanted = self.rate_limiter.acquire_up_to(wanted)
        batch = self._generator.events(first, wanted, stride)
        split = replace(split, next_index=first + wanted * stride)
        if split.exhausted:
            del splits[k]
        else:
            splits[k] = split
        return batch

    def snapshot_splits(self) -> list[DataGeneratorSplit]:
        return list(self._splits)

    def close(self) -> None:
        self._splits.clear()

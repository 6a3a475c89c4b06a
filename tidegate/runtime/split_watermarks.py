"""Split-aware watermarks of one source subtask (Flink's per-split watermark generation of a
FLIP-27 SourceOperator, its WatermarkOutputMultiplexer): pure bookkeeping, driven by events.

A source whose reader says which split each record came from (`SplitRecords` and
`SplitReportingReader` in connectors/base.py) gets one WatermarkGenerator per split instead of
one for the subtask, so the subtask's watermark follows its slowest split, however the reader
interleaves the splits' records:

1. `add_split(id)`: a split the reader started reading gets a generator of its own (from the
   strategy, so with `with_idleness` it is wrapped in WatermarksWithIdleness) and an output
   whose watermark is MIN_WATERMARK until its generator emits one: a new split holds the
   subtask's watermark back until it made progress or went idle.
2. `on_records(runs, values, timestamps, output)`: each run of records goes to its split's
   generator (`on_events` with the run's highest timestamp, or `on_event` per record); a split
   that had gone idle is active again. Then step 4.
3. `on_periodic_emit(output)` (every auto-watermark interval): every split's generator emits
   into its split's output (a watermark, or "idle" after `with_idleness`'s timeout without
   records, measured by the generator's clock). Then step 4.
4. Combine: the subtask's watermark is the minimum over the splits that are not idle; if every
   split is idle the subtask is idle (its downstream does not wait for it). With no split at
   all nothing changes (as in Flink), except with `with_idleness`, where a subtask without
   splits is idle.
5. `finish_split(id)`: a split that ended (a bounded split at its stopping offset) is dropped:
   it no longer holds the watermark back (its records returned after that do not count).

Watermarks only advance: WatermarkGeneration (runtime/timestamps.py) drops a combined
watermark below the last one it sent, e.g. when a new split joins behind the others.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from tidegate.common.watermark_strategy import WatermarkGenerator
from tidegate.runtime.internal_timers import MIN_WATERMARK

__all__ = ["SplitWatermarks"]


class _SplitOutput:
    """The WatermarkOutput of one split's generator: its highest watermark and idleness."""

    __slots__ = ("generator", "idle", "on_events", "watermark")

    def __init__(self, generator: WatermarkGenerator) -> None:
        self.generator = generator
        self.on_events = getattr(generator, "on_events", None)
        self.watermark = MIN_WATERMARK
        self.idle = False

    def emit_watermark(self, watermark: Any) -> None:
        ts = watermark if type(watermark) is int else watermark.get_timestamp()
        if ts > self.watermark:
            self.watermark = ts
        self.idle = False

    def mark_idle(self) -> None:
        self.idle = True

    def mark_active(self) -> None:
        self.idle = False


class SplitWatermarks:
    """The per-split generators of one source subtask (see the module docstring). Outputs
    go to a WatermarkOutput (`emit_watermark`, `mark_idle`), as one generator's would."""

    def __init__(
        self, create_generator: Callable[[], WatermarkGenerator], idle_without_splits: bool
    ) -> None:
        """`create_generator`: a new generator for each split (the strategy's);
        `idle_without_splits`: a subtask without splits is idle (the strategy has
        `with_idleness`)."""
        self._create = create_generator
        self._idle_without_splits = idle_without_splits
        self._splits: dict[Hashable, _SplitOutput] = {}
        #: splits that finished (their last records may come after `finish_split`)
        self._finished: set[Hashable] = set()

    @property
    def split_ids(self) -> list[Hashable]:
        """The splits being read (added and not finished), in the order they were added."""
        return list(self._splits)

    def watermark_of(self, split_id: Hashable) -> int:
        """The highest watermark split `split_id`'s generator emitted (MIN_WATERMARK: none)."""
        return self._splits[split_id].watermark

    def is_idle(self, split_id: Hashable) -> bool:
        return self._splits[split_id].idle

    def add_split(self, split_id: Hashable) -> None:
        """Step 1 (a split already known keeps its generator)."""
        if split_id not in self._splits:
            self._splits[split_id] = _SplitOutput(self._create())

    def finish_split(self, split_id: Hashable) -> None:
        """Step 5. A reader may report it before returning the split's last records (in the
        same poll): those no longer count."""
        self._splits.pop(split_id, None)
        self._finished.add(split_id)

    def on_records(
        self, runs: list[tuple[Hashable, int]], values: list, timestamps: list[int], output: Any
    ) -> None:
        """Step 2: `runs` lists `(split id, end)`: the records from the previous run's end (0
        for the first) up to `end` came from that split (added, or finished)."""
        splits, start = self._splits, 0
        for split_id, end in runs:
            split = splits.get(split_id)
            if split is None:
                if split_id not in self._finished:
                    raise ValueError(
                        f"a reader returned records of split {split_id!r} before reporting it: "
                        "call listener.add_split(split_id) when a split starts "
                        "(SplitReportingReader in connectors/base.py)"
                    )
            elif end > start:
                split.idle = False
                if split.on_events is not None:
                    split.on_events(max(timestamps[start:end]))
                else:
                    on_event = split.generator.on_event
                    for i in range(start, end):
                        on_event(values[i], timestamps[i], split)
            start = end
        if start != len(timestamps):
            raise ValueError(
                f"a reader's split runs cover {start} of its {len(timestamps)} records: the "
                "last run must end at the batch's length (SplitRecords in connectors/base.py)"
            )
        self.combine(output)

    def on_periodic_emit(self, output: Any) -> None:
        """Step 3 (a WatermarkGenerator's periodic call)."""
        for split in self._splits.values():
            split.generator.on_periodic_emit(split)
        self.combine(output)

    def combine(self, output: Any) -> None:
        """Step 4."""
        active = [s.watermark for s in self._splits.values() if not s.idle]
        if active:
            output.emit_watermark(min(active))
        elif self._splits or self._idle_without_splits:
            output.mark_idle()

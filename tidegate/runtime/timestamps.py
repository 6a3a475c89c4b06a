"""Timestamp assignment and watermark generation for one operator subtask: a source with a
WatermarkStrategy, or `assign_timestamps_and_watermarks` (TimestampsAndWatermarksOperator).

`WatermarkGeneration` drives one strategy's TimestampAssigner and WatermarkGenerator:

1. `assign(batch)`: extract every record's timestamp (a TimestampedBatch results) and tell the
   generator (`on_event` per record; built-in generators take the batch's maximum at once).
   A source whose reader reports its splits has one generator per split instead
   (`split_aware`: runtime/split_watermarks.py), told each split's records (`assign(batch,
   runs)`); their combined watermark and idleness then go where one generator's would;
2. `before_records()` (an idle output becomes active again, a restored watermark is re-sent),
   then the operator emits the batch;
3. `flush()`: send what the generator emitted meanwhile, after the batch: a WatermarkStatus
   change and/or the newest watermark, if above the last one (watermarks only advance);
4. `periodic()` (every auto-watermark interval, from the task loop): `on_periodic_emit`, then
   `flush()`.

An output that was idle becomes active again before its next batch or watermark. The last
emitted watermark is the operator's `current_watermark`, checkpointed with its operator state
(runtime/watermarks.py), so after a restore it starts from there and never goes back.
"""

from __future__ import annotations

import time
from typing import Any

from tidegate.common.watermark_strategy import NoWatermarksGenerator
from tidegate.runtime.internal_timers import MAX_WATERMARK, MIN_WATERMARK
from tidegate.runtime.operators import StreamOperator
from tidegate.runtime.records import TimestampedBatch, timestamps_of
from tidegate.runtime.split_watermarks import SplitWatermarks

__all__ = ["PeriodicWatermarks", "TimestampsAndWatermarksOperator", "WatermarkGeneration"]


class _Output:
    """The WatermarkOutput a generator emits into; read back by WatermarkGeneration.flush."""

    __slots__ = ("pending", "want_idle")

    def __init__(self) -> None:
        self.pending: int | None = None
        self.want_idle = False

    def emit_watermark(self, watermark: Any) -> None:
        ts = watermark if type(watermark) is int else watermark.get_timestamp()
        if self.pending is None or ts > self.pending:
            self.pending = ts
        self.want_idle = False

    def mark_idle(self) -> None:
        self.want_idle = True

    def mark_active(self) -> None:
        self.want_idle = False


class WatermarkGeneration:
    """One strategy at work in `operator` (see the module docstring)."""

    def __init__(
        self, strategy: Any, operator: StreamOperator, interval_ms: Any, split_aware: bool = False
    ) -> None:
        """`interval_ms`: milliseconds between periodic watermarks (0: none), or a callable
        returning them (the job's configuration, read when the subtask starts).
        `split_aware`: one generator per split (a source whose reader reports its splits)."""
        if callable(interval_ms):
            interval_ms = interval_ms()
        self.operator = operator
        self.extract = strategy.create_timestamp_assigner()
        #: the per-split generators (None: one generator for the subtask)
        self.splits: SplitWatermarks | None = None
        if operator.ctx.batch:  # BATCH mode: the only watermark is the one at the end
            self.generator, interval_ms = NoWatermarksGenerator(), 0
        elif split_aware and strategy.generates_watermarks:
            self.splits = SplitWatermarks(
                strategy.create_watermark_generator, strategy.idleness_ms is not None
            )
            self.generator = self.splits
        else:
            self.generator = strategy.create_watermark_generator()
        self._on_events = getattr(self.generator, "on_events", None)
        self._output = _Output()
        #: the status sent downstream last (True: idle)
        self.idle = False
        #: seconds between `periodic` calls (None: no periodic watermarks)
        self.interval_s = interval_ms / 1000 if interval_ms > 0 else None
        #: a restored watermark is re-sent downstream before anything else
        self._resend = operator.current_watermark > MIN_WATERMARK

    def assign(self, batch: list, runs: list | None = None) -> list:
        """Step 1: the batch with its records' timestamps. `runs`: which split each record
        came from (`SplitRecords.split_runs`), for per-split generators."""
        previous = timestamps_of(batch)
        extract = self.extract
        if extract is None:
            if previous is None:
                raise ValueError(
                    f"{self.operator.name}: the records have no timestamps to generate "
                    "watermarks from: give the WatermarkStrategy a timestamp assigner, e.g. "
                    ".with_timestamp_assigner(MyAssigner()) whose extract_timestamp(value, "
                    "record_timestamp) returns int milliseconds"
                )
            timestamps = previous
            out = batch
        else:
            if previous is None:
                timestamps = [extract(v, MIN_WATERMARK) for v in batch]
            else:
                timestamps = [extract(v, t) for v, t in zip(batch, previous, strict=True)]
            _check_timestamps(timestamps, self.operator.name)
            out = TimestampedBatch(batch, timestamps)
        if self.splits is not None:
            if runs is None:
                raise ValueError(
                    f"{self.operator.name}: a reader that reports its splits returned a batch "
                    "without split runs: return SplitRecords (connectors/base.py)"
                )
            self.splits.on_records(runs, out, timestamps, self._output)
        elif timestamps:
            if self._on_events is not None:
                self._on_events(max(timestamps))
            else:
                on_event, output = self.generator.on_event, self._output
                for v, t in zip(out, timestamps, strict=True):
                    on_event(v, t, output)
        return out

    def before_records(self) -> None:
        """Step 2: an idle output becomes active before its next records."""
        self._output.want_idle = False
        if self.idle or self._resend:
            self.flush()

    def flush(self) -> None:
        """Step 3: send the status change and the newest watermark, if any."""
        op, output = self.operator, self._output
        if self._resend:
            self._resend = False
            op.emit_watermark(op.current_watermark)
        if self.idle and not output.want_idle:
            self.idle = False
            op.emit_watermark_status(False)
        pending, output.pending = output.pending, None
        if pending is not None and pending > op.current_watermark:
            op.current_watermark = pending
            op.emit_watermark(pending)
        if output.want_idle and not self.idle:
            self.idle = True
            op.emit_watermark_status(True)

    def periodic(self) -> None:
        """Step 4."""
        self.generator.on_periodic_emit(self._output)
        self.flush()


def _check_timestamps(timestamps: list, where: str) -> None:
    if timestamps and set(map(type, timestamps)) != {int}:
        bad = next(t for t in timestamps if type(t) is not int)
        raise TypeError(
            f"{where}: a timestamp assigner returned {type(bad).__name__} {bad!r}; event-time "
            "timestamps are int milliseconds since the epoch (e.g. int(seconds * 1000))"
        )


class TimestampsAndWatermarksOperator(StreamOperator):
    """`DataStream.assign_timestamps_and_watermarks(strategy)`: (re)assigns timestamps and
    generates watermarks mid-stream. Watermarks (and idleness) from upstream are dropped,
    except the final MAX_WATERMARK of an ended input (as in Flink)."""

    stores_watermark = True  # its last emitted watermark, re-sent first after a restore

    def __init__(self, strategy: Any, interval_ms: Any = 200, **kw: Any) -> None:
        super().__init__(None, **kw)
        self.strategy = strategy
        self.interval_ms = interval_ms

    def open(self) -> None:
        super().open()
        self.watermarks = WatermarkGeneration(self.strategy, self, self.interval_ms)

    def process_batch(self, records: list) -> None:
        wg = self.watermarks
        wg.before_records()
        self.emit(wg.assign(records))
        wg.flush()

    def process_watermark(self, watermark: int) -> None:
        if watermark == MAX_WATERMARK:
            super().process_watermark(watermark)

    def process_watermark_status(self, idle: bool) -> None:
        """Upstream idleness is dropped too: this operator's own strategy decides (with
        `with_idleness`) when its output is idle."""


class PeriodicWatermarks:
    """The task's hook: calls `periodic()` of the chain's WatermarkGenerations every interval."""

    def __init__(self, operators: list[Any]) -> None:
        self._generations = [
            op.watermarks
            for op in operators
            if isinstance(getattr(op, "watermarks", None), WatermarkGeneration)
            and op.watermarks.interval_s is not None
        ]
        self._interval = min((g.interval_s for g in self._generations), default=0.0)
        self._next = time.monotonic() + self._interval

    def __bool__(self) -> bool:
        return bool(self._generations)

    def maybe_emit(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._interval
        for g in self._generations:
            g.periodic()

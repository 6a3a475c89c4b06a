"""`WatermarkStrategy`, `TimestampAssigner` and watermark generators (PyFlink's names and path,
`pyflink.common.watermark_strategy`; generators as Flink's `WatermarkGenerator`).

A strategy says how a source (`env.from_source(source, strategy, name)`) or
`DataStream.assign_timestamps_and_watermarks(strategy)` gives each record its event-time
timestamp (the TimestampAssigner) and when it emits watermarks (the WatermarkGenerator):

* `on_event(event, event_timestamp, output)` is called for every record;
* `on_periodic_emit(output)` every `pipeline.auto-watermark-interval` (200 ms by default).

The runtime keeps the emitted watermarks monotonic (a smaller one is ignored), emits them after
the records that preceded them, and restores the last one after a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "AscendingTimestampsWatermarks",
    "BoundedOutOfOrdernessWatermarks",
    "NoWatermarksGenerator",
    "TimestampAssigner",
    "Watermark",
    "WatermarkGenerator",
    "WatermarkOutput",
    "WatermarkStrategy",
    "WatermarksWithIdleness",
]

#: Flink's Long.MIN_VALUE: "no timestamp" / "no watermark yet"
_MIN = -(2**63)


class TimestampAssigner:
    """Extracts a record's event-time timestamp (int milliseconds since the epoch)."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """`record_timestamp`: the timestamp the record already has (-2**63 if none)."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Watermark:
    """A watermark as generators emit it (Flink's `Watermark`)."""

    timestamp: int

    def get_timestamp(self) -> int:
        return self.timestamp


class WatermarkOutput:
    """Where a generator emits (the runtime implements it)."""

    def emit_watermark(self, watermark: Watermark) -> None:
        """Emit a watermark (also marks the output active). A smaller one than the last is
        ignored."""
        raise NotImplementedError

    def mark_idle(self) -> None:
        """No records for a while: downstream must not wait for this output's watermark."""
        raise NotImplementedError

    def mark_active(self) -> None:
        raise NotImplementedError


class WatermarkGenerator:
    """Generates watermarks from the records' timestamps (Flink's interface)."""

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        """Called for every record; may emit a watermark (a punctuated generator)."""

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Called every auto-watermark interval; may emit a watermark (a periodic one)."""


class BoundedOutOfOrdernessWatermarks(WatermarkGenerator):
    """Records may arrive up to `max_out_of_orderness_ms` late: the watermark is the highest
    timestamp seen minus that bound minus 1 (Flink's BoundedOutOfOrdernessWatermarks)."""

    def __init__(self, max_out_of_orderness_ms: int) -> None:
        if max_out_of_orderness_ms < 0:
            raise ValueError(
                f"the out-of-orderness bound must be >= 0 ms, got {max_out_of_orderness_ms}"
            )
        self.out_of_orderness = max_out_of_orderness_ms
        self.max_timestamp = _MIN + max_out_of_orderness_ms + 1

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        if event_timestamp > self.max_timestamp:
            self.max_timestamp = event_timestamp

    def on_events(self, max_timestamp: int) -> None:
        """A batch whose highest timestamp is `max_timestamp` (the runtime's fast path)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        output.emit_watermark(Watermark(self.max_timestamp - self.out_of_orderness - 1))


class AscendingTimestampsWatermarks(BoundedOutOfOrdernessWatermarks):
    """Timestamps never decrease: the watermark trails the highest one by 1 ms."""

    def __init__(self) -> None:
        super().__init__(0)


class NoWatermarksGenerator(WatermarkGenerator):
    """Emits no watermarks (event time never advances, except at the end of a bounded input)."""

    def on_events(self, max_timestamp: int) -> None:
        """Nothing to do for a whole batch (saves the per-record `on_event` calls)."""


class WatermarksWithIdleness(WatermarkGenerator):
    """Marks the output idle when no record arrived for `idle_timeout_ms` (Flink's
    WatermarksWithIdleness): an idle source split does not hold the job's watermark back."""

    def __init__(
        self,
        generator: WatermarkGenerator,
        idle_timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if idle_timeout_ms <= 0:
            raise ValueError(f"the idle timeout must be > 0 ms, got {idle_timeout_ms}")
        self.generator = generator
        self.idle_timeout_ms = idle_timeout_ms
        self._clock = clock
        self._counter = 0
        self._last_counter = 0
        self._idle_since: float | None = None
        if getattr(generator, "on_events", None) is None:
            self.on_events = None  # type: ignore[assignment]  # the runtime calls on_event

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        self.generator.on_event(event, event_timestamp, output)
        self._counter += 1

    def on_events(self, max_timestamp: int) -> None:
        self.generator.on_events(max_timestamp)  # type: ignore[attr-defined]
        self._counter += 1

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self._is_idle():
            output.mark_idle()
        else:
            self.generator.on_periodic_emit(output)

    def _is_idle(self) -> bool:
        if self._counter != self._last_counter:
            self._last_counter = self._counter
            self._idle_since = None
            return False
        now = self._clock()
        if self._idle_since is None:
            self._idle_since = now
            return False
        return (now - self._idle_since) * 1000 >= self.idle_timeout_ms


def _millis(duration: Any, what: str) -> int:
    to_ms = getattr(duration, "to_milliseconds", None)
    if to_ms is not None:
        return int(to_ms())
    if isinstance(duration, int) and not isinstance(duration, bool):
        return duration
    raise TypeError(
        f"{what} expects a Duration (e.g. Duration.of_seconds(5)), got {type(duration).__name__}"
    )


@dataclass(frozen=True)
class WatermarkStrategy:
    """How to assign timestamps and generate watermarks; build it with the static methods."""

    kind: str
    max_out_of_orderness_ms: int = 0
    timestamp_assigner: Any = None
    idleness_ms: int | None = None
    #: `for_generator`: a callable returning a new WatermarkGenerator
    generator_supplier: Any = None

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        return WatermarkStrategy("none")

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        return WatermarkStrategy("monotonous")

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Any) -> WatermarkStrategy:
        ms = _millis(max_out_of_orderness, "for_bounded_out_of_orderness")
        if ms < 0:
            raise ValueError(f"the out-of-orderness bound must be >= 0, got {ms} ms")
        return WatermarkStrategy("bounded", max_out_of_orderness_ms=ms)

    @staticmethod
    def for_generator(generator_supplier: Callable[[], WatermarkGenerator]) -> WatermarkStrategy:
        """A custom WatermarkGenerator: `generator_supplier()` creates one per subtask."""
        if not callable(generator_supplier):
            raise TypeError(
                "for_generator expects a callable returning a WatermarkGenerator (e.g. the "
                "generator class), got " + type(generator_supplier).__name__
            )
        return WatermarkStrategy("custom", generator_supplier=generator_supplier)

    def with_timestamp_assigner(self, timestamp_assigner: Any) -> WatermarkStrategy:
        if not (
            isinstance(timestamp_assigner, TimestampAssigner)
            or hasattr(timestamp_assigner, "extract_timestamp")
            or callable(timestamp_assigner)
        ):
            raise TypeError(
                "with_timestamp_assigner expects a TimestampAssigner (with "
                "extract_timestamp(value, record_timestamp)) or a callable of the same "
                f"arguments, got {type(timestamp_assigner).__name__}"
            )
        return replace(self, timestamp_assigner=timestamp_assigner)

    def with_idleness(self, idle_timeout: Any) -> WatermarkStrategy:
        ms = _millis(idle_timeout, "with_idleness")
        if ms <= 0:
            raise ValueError(f"the idle timeout must be > 0, got {ms} ms")
        return replace(self, idleness_ms=ms)

    # used by the runtime -------------------------------------------------------------------
    @property
    def generates_watermarks(self) -> bool:
        return self.kind != "none"

    def create_watermark_generator(self) -> WatermarkGenerator:
        match self.kind:
            case "none":
                generator: WatermarkGenerator = NoWatermarksGenerator()
            case "monotonous":
                generator = AscendingTimestampsWatermarks()
            case "bounded":
                generator = BoundedOutOfOrdernessWatermarks(self.max_out_of_orderness_ms)
            case "custom":
                generator = self.generator_supplier()
            case _:
                raise ValueError(f"unknown watermark strategy kind {self.kind!r}")
        if self.idleness_ms is not None:
            generator = WatermarksWithIdleness(generator, self.idleness_ms)
        return generator

    def create_timestamp_assigner(self) -> Callable[[Any, int], int] | None:
        """`extract(value, record_timestamp)`, or None (records keep their timestamps)."""
        assigner = self.timestamp_assigner
        if assigner is None:
            return None
        return getattr(assigner, "extract_timestamp", assigner)

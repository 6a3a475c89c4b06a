"""The interval join operator (Flink's IntervalJoinOperator), event time only:
`left.key_by(k1).interval_join(right.key_by(k2)).between(lower, upper).process(function)`.

A left record with timestamp `t` joins every right record of its key whose timestamp lies in
`[t + lower, t + upper]` (bounds in ms; exclusive bounds were turned into inclusive ones by the
datastream layer). Each side is buffered in keyed MapState, timestamp -> list of records, so
it is checkpointed, restored and rescaled by key group on either state backend. A record
arriving behind the watermark is late: dropped, or sent to the side output given for its side
(as in Flink). A record's bucket is
removed when the watermark passes the last time a record of the other side could still join
it: one event-time timer per key and cleanup time, whose firing removes every bucket of that
key (both sides) that is due. Each joined pair's output gets the larger of the two timestamps.
"""

from __future__ import annotations

from typing import Any

from tidegate.runtime.internal_timers import MIN_WATERMARK, TimeDomain
from tidegate.runtime.records import TimestampedBatch, timestamps_of
from tidegate.runtime.timer_service import OperatorTimers
from tidegate.runtime.two_input import TwoInputStreamOperator
from tidegate.state.descriptors import MapStateDescriptor

__all__ = ["IntervalJoinOperator", "JoinContext"]

LEFT_BUFFER = "interval-join-left"
RIGHT_BUFFER = "interval-join-right"


class JoinContext:
    """The `ctx` of `ProcessJoinFunction.process_element(left, right, ctx)`."""

    __slots__ = ("_left", "_op", "_right")

    def __init__(self, operator: IntervalJoinOperator) -> None:
        self._op = operator
        self._left = self._right = 0

    def get_left_timestamp(self) -> int:
        return self._left

    def get_right_timestamp(self) -> int:
        return self._right

    def get_timestamp(self) -> int:
        """The output's timestamp: the larger of both records'."""
        return max(self._left, self._right)

    def output(self, output_tag: Any, value: Any) -> None:
        self._op.side_outputs.collect(output_tag, value, self.get_timestamp())


class _CleanupTimers(OperatorTimers):
    """The operator's own event-time timers: firing one removes the key's due buckets."""

    def _trigger(self, timestamp: int, domain: TimeDomain) -> None:
        self._operator.clean_up(timestamp)


class IntervalJoinOperator(TwoInputStreamOperator):
    """See the module docstring."""

    tagged_outputs = True  # `yield tag, value` goes to a side output

    stores_watermark = True
    keyed = True

    def __init__(
        self,
        function: Any,
        key_selector1: Any,
        key_selector2: Any,
        lower_bound: int,
        upper_bound: int,
        left_late_tag: Any = None,
        right_late_tag: Any = None,
        **kw: Any,
    ) -> None:
        super().__init__(function, **kw)
        if lower_bound > upper_bound:
            raise ValueError(
                f"interval join: the lower bound ({lower_bound} ms) must not be above the upper "
                f"bound ({upper_bound} ms), exclusive bounds counted"
            )
        self.key_selector1, self.key_selector2 = key_selector1, key_selector2
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        #: OutputTags late records of each side go to (None: dropped)
        self.late_tags = (left_late_tag, right_late_tag)
        self.timers: OperatorTimers | None = None

    def open(self) -> None:
        backend = self.keyed_backend
        self._left = backend.get_map_state(MapStateDescriptor(LEFT_BUFFER))
        self._right = backend.get_map_state(MapStateDescriptor(RIGHT_BUFFER))
        self.timers = _CleanupTimers(self)
        self.timers.internal.current_watermark = self.current_watermark
        super().open()
        self._context = JoinContext(self)
        self._call = self.function.process_element

    def on_watermark(self, watermark: int) -> None:
        self.timers.advance_watermark(watermark)

    def finish(self) -> None:
        self.timers.end_of_input()
        super().finish()

    # the two inputs ------------------------------------------------------------------------
    def process_batch1(self, records: list) -> None:
        lower, upper = self.lower_bound, self.upper_bound
        self._run(records, self.key_selector1, self._left, self._right, lower, upper, True)

    def process_batch2(self, records: list) -> None:
        lower, upper = -self.upper_bound, -self.lower_bound
        self._run(records, self.key_selector2, self._right, self._left, lower, upper, False)

    def _run(
        self,
        records: list,
        select: Any,
        ours: Any,
        theirs: Any,
        lower: int,
        upper: int,
        is_left: bool,
    ) -> None:
        """Buffer each record, join it with the other side's buffered records whose timestamp
        is within [ts + lower, ts + upper] (bounds relative to this side), and register its
        bucket's cleanup timer."""
        timestamps = timestamps_of(records) if type(records) is not list else None
        if timestamps is None and records:
            raise ValueError(
                f"{self.name}: the interval join works in event time and got records without "
                "timestamps: call assign_timestamps_and_watermarks(...) on both inputs"
            )
        backend, internal, out = self.keyed_backend, self.timers.internal, TimestampedBatch()
        watermark, late_tag = self.current_watermark, self.late_tags[0 if is_left else 1]
        for value, ts in zip(records, timestamps or (), strict=True):
            if watermark != MIN_WATERMARK and ts < watermark:
                if late_tag is not None:  # late: its partners' buckets may be gone already
                    self.side_outputs.collect(late_tag, value, ts)
                continue
            backend.current_key = select(value)
            bucket = ours.get(ts)
            ours.put(ts, [value] if bucket is None else [*bucket, value])  # never in place
            for other_ts, others in theirs.items():
                if ts + lower <= other_ts <= ts + upper:
                    for other in others:
                        if is_left:
                            self._join(value, other, ts, other_ts, out)
                        else:
                            self._join(other, value, other_ts, ts, out)
            internal.register(TimeDomain.EVENT_TIME, ts + upper if upper > 0 else ts)
        if out:
            self.emit(out)
        self.side_outputs.flush()

    def _join(self, left: Any, right: Any, left_ts: int, right_ts: int, out: Any) -> None:
        ctx = self._context
        ctx._left, ctx._right = left_ts, right_ts
        produced = self._call(left, right, ctx)
        if produced is not None:
            before = len(out)
            out.extend(produced)
            out.timestamps.extend([max(left_ts, right_ts)] * (len(out) - before))

    # cleanup -------------------------------------------------------------------------------
    def clean_up(self, timestamp: int) -> None:
        """A cleanup timer of the current key fired at `timestamp`: drop its buckets that no
        record of the other side can join any more (left: t + upper <= timestamp, right:
        t - lower <= timestamp, each at least t)."""
        upper, lower = self.upper_bound, self.lower_bound
        for buffer, bound in ((self._left, upper), (self._right, -lower)):
            for ts in list(buffer.keys()):
                if (ts + bound if bound > 0 else ts) <= timestamp:
                    buffer.remove(ts)

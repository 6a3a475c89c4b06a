"""Per-split watermarks (runtime/split_watermarks.py) by scripted events: the subtask's
watermark is the minimum over its splits that are not idle, whatever the interleaving; new
splits hold it back, finished ones do not; idleness per split with a scripted clock; and the
same through the source operator with a reader that reports its splits."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tidegate.common import Duration, WatermarkStrategy
from tidegate.common.watermark_strategy import (
    BoundedOutOfOrdernessWatermarks,
    Watermark,
    WatermarkGenerator,
    WatermarksWithIdleness,
)
from tidegate.connectors.base import Boundedness, SplitRecords, SplitReportingReader
from tidegate.runtime.connector_operators import SourceOperator
from tidegate.runtime.internal_timers import MIN_WATERMARK
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.split_watermarks import SplitWatermarks

IDLE_MS = 100


class Clock:
    """Scripted monotonic time (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Output:
    """A WatermarkOutput keeping what the combiner emitted, in order."""

    def __init__(self) -> None:
        self.events: list = []

    def emit_watermark(self, watermark: int) -> None:
        self.events.append(watermark)

    def mark_idle(self) -> None:
        self.events.append("idle")

    @property
    def last(self):
        return self.events[-1] if self.events else None


def bounded(clock: Clock | None = None) -> SplitWatermarks:
    """Per-split BoundedOutOfOrdernessWatermarks(0) (watermark = highest timestamp - 1),
    with an idle timeout of IDLE_MS on `clock` if given."""
    if clock is None:
        return SplitWatermarks(lambda: BoundedOutOfOrdernessWatermarks(0), False)
    return SplitWatermarks(
        lambda: WatermarksWithIdleness(BoundedOutOfOrdernessWatermarks(0), IDLE_MS, clock),
        True,
    )


def records(*runs: tuple[str, list[int]]) -> tuple[list, list[int], list]:
    """(values, timestamps, split runs) of a batch made of `(split, timestamps)` runs."""
    values, timestamps, out = [], [], []
    for split, stamps in runs:
        values += [f"{split}@{t}" for t in stamps]
        timestamps += stamps
        out.append((split, len(values)))
    return values, timestamps, out


def feed(sw: SplitWatermarks, output: Output, *runs: tuple[str, list[int]]) -> None:
    values, timestamps, split_runs = records(*runs)
    sw.on_records(split_runs, values, timestamps, output)


def test_the_watermark_follows_the_slowest_split_whatever_the_interleaving():
    for order in (["a", "b"], ["b", "a"]):
        sw, out = bounded(), Output()
        stamps = {"a": [100, 200, 300], "b": [10, 20]}
        for split in order:
            sw.add_split(split)
        feed(sw, out, *[(s, stamps[s]) for s in order])
        sw.on_periodic_emit(out)
        assert out.last == 19  # b's highest timestamp - 1, not a's
        assert (sw.watermark_of("a"), sw.watermark_of("b")) == (299, 19)
        feed(sw, out, ("b", [250]), ("a", [400]))
        sw.on_periodic_emit(out)
        assert out.last == 249


def test_a_split_without_records_holds_the_watermark_back_until_it_finishes():
    sw, out = bounded(), Output()
    sw.add_split("a")
    sw.add_split("empty")
    feed(sw, out, ("a", [100]))
    sw.on_periodic_emit(out)
    assert out.last == MIN_WATERMARK and sw.watermark_of("empty") == MIN_WATERMARK
    sw.finish_split("empty")
    sw.on_periodic_emit(out)
    assert out.last == 99
    assert sw.split_ids == ["a"]


def test_a_finished_slow_split_no_longer_holds_the_watermark_back():
    sw, out = bounded(), Output()
    sw.add_split("slow")
    sw.add_split("fast")
    feed(sw, out, ("slow", [5]), ("fast", [1000]))
    sw.on_periodic_emit(out)
    assert out.last == 4
    sw.finish_split("slow")
    sw.on_periodic_emit(out)
    assert out.last == 999


def test_the_last_records_of_a_split_reported_finished_in_the_same_poll_do_not_revive_it():
    sw, out = bounded(), Output()
    sw.add_split("ending")
    sw.add_split("going-on")
    feed(sw, out, ("going-on", [1000]))
    sw.finish_split("ending")  # the reader finished it while reading its last records
    feed(sw, out, ("ending", [7]), ("going-on", [1001]))
    sw.on_periodic_emit(out)
    assert sw.split_ids == ["going-on"] and out.last == 1000


def test_records_of_a_split_never_reported_are_refused():
    sw = bounded()
    with pytest.raises(ValueError, match="split 'x' before reporting it"):
        sw.on_records([("x", 1)], ["v"], [1], Output())


def test_a_new_split_joins_at_the_minimum_watermark():
    sw, out = bounded(), Output()
    sw.add_split("a")
    feed(sw, out, ("a", [500]))
    sw.on_periodic_emit(out)
    assert out.last == 499
    sw.add_split("new")  # a discovered partition: holds back until it made progress
    sw.on_periodic_emit(out)
    assert out.last == MIN_WATERMARK
    feed(sw, out, ("new", [700]))
    sw.on_periodic_emit(out)
    assert out.last == 499


def test_an_idle_split_stops_counting_and_counts_again_with_its_next_records():
    clock = Clock()
    sw, out = bounded(clock), Output()
    sw.add_split("busy")
    sw.add_split("quiet")
    feed(sw, out, ("busy", [100]), ("quiet", [10]))
    sw.on_periodic_emit(out)
    assert out.last == 9
    for t in (0.05, 0.1, 0.15, 0.2):  # busy keeps producing, quiet produces nothing
        clock.now = t
        feed(sw, out, ("busy", [int(t * 1000) + 100]))
        sw.on_periodic_emit(out)
    assert sw.is_idle("quiet") and not sw.is_idle("busy")
    assert out.last == 299  # busy's watermark alone
    feed(sw, out, ("quiet", [20]))  # active again: its watermark counts from now on
    assert not sw.is_idle("quiet") and out.last == 9
    sw.on_periodic_emit(out)
    assert out.last == 19


def test_the_subtask_is_idle_when_all_its_splits_are_and_active_with_the_next_records():
    clock = Clock()
    sw, out = bounded(clock), Output()
    sw.add_split("a")
    sw.add_split("b")
    feed(sw, out, ("a", [100]), ("b", [200]))
    sw.on_periodic_emit(out)
    assert out.last == 99
    for t in (0.0, 0.05, 0.1):
        clock.now = t
        sw.on_periodic_emit(out)
    assert out.last == "idle"
    feed(sw, out, ("b", [300]))
    assert out.last == 199  # active again (b's watermark; a is still idle)


def test_without_splits_a_subtask_is_idle_only_with_idleness():
    out = Output()
    bounded().on_periodic_emit(out)
    assert out.events == []  # as Flink: nothing changes
    bounded(Clock()).on_periodic_emit(out)
    assert out.events == ["idle"]


@dataclass
class Punctuated(WatermarkGenerator):
    """Emits a watermark on every record (a generator without `on_events`)."""

    seen: list = field(default_factory=list)

    def on_event(self, event, event_timestamp, output):
        self.seen.append(event)
        output.emit_watermark(Watermark(event_timestamp))


def test_a_generator_without_on_events_gets_each_record_of_its_split_only():
    made: list[Punctuated] = []

    def create() -> Punctuated:
        made.append(Punctuated())
        return made[-1]

    sw, out = SplitWatermarks(create, False), Output()
    sw.add_split("a")
    sw.add_split("b")
    feed(sw, out, ("a", [1, 2]), ("b", [7]), ("a", [3]))
    assert [g.seen for g in made] == [["a@1", "a@2", "a@3"], ["b@7"]]
    assert out.last == 3


def test_runs_that_do_not_cover_the_batch_are_refused():
    sw = bounded()
    sw.add_split("a")
    with pytest.raises(ValueError, match="split runs cover 1 of its 2 records"):
        sw.on_records([("a", 1)], ["x", "y"], [1, 2], Output())


# through the source operator ------------------------------------------------------------------
@dataclass
class Reader:
    """Two in-memory splits, read in the scripted order of `script`: (split, timestamps)."""

    script: list
    listener: object = None

    def report_splits(self, listener):
        self.listener = listener
        listener.add_split("p0")
        listener.add_split("p1")

    def poll_batch(self, max_records):
        if not self.script:
            return None
        step = self.script.pop(0)
        if step[0] == "finish":
            self.listener.finish_split(step[1])
            return []
        split, stamps = step
        return SplitRecords([f"{split}@{t}" for t in stamps], stamps, [(split, len(stamps))])

    def snapshot_splits(self):
        return []

    def close(self):
        pass


@dataclass
class Source:
    reader: Reader
    boundedness: Boundedness = Boundedness.CONTINUOUS_UNBOUNDED

    def create_splits(self, parallelism):
        return []

    def create_reader(self, splits, subtask_index, parallelism):
        return self.reader


class Collect:
    def __init__(self) -> None:
        self.items: list = []

    def process_batch(self, records) -> None:
        self.items.append(("batch", list(records), records.timestamps))

    def process_watermark(self, watermark: int) -> None:
        self.items.append(("wm", watermark))

    def process_watermark_status(self, idle: bool) -> None:
        self.items.append(("idle", idle))


def test_the_source_operator_emits_the_slowest_partitions_watermark_and_drops_finished_ones():
    reader = Reader([("p0", [1000, 2000]), ("p1", [50]), ("p0", [3000]), ("finish", "p1")])
    assert isinstance(reader, SplitReportingReader)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_hours(1))
    op = SourceOperator(Source(reader), strategy, 0)
    op.uid, op.name, out = "src", "Source", Collect()
    op.outputs = [out]
    op.initialize_state(OperatorRuntime(0, 1, 128, 0), None)
    op.open()
    while op.poll(10) is not None:
        op.watermarks.periodic()
    assert out.items == [
        ("batch", ["p0@1000", "p0@2000"], [1000, 2000]),  # p1 holds the watermark back
        ("batch", ["p1@50"], [50]),
        ("wm", 49),
        ("batch", ["p0@3000"], [3000]),
        ("wm", 2999),  # p1 finished: p0 alone
    ]

"""WatermarkStrategy and its generators: what each built-in strategy emits, idleness with an
injected clock, custom generators, timestamp assigners, the auto-watermark interval setting,
and clear errors for bad arguments."""

from __future__ import annotations

import pytest

from tidegate.common import Configuration, Duration, WatermarkStrategy
from tidegate.common.watermark_strategy import (
    BoundedOutOfOrdernessWatermarks,
    TimestampAssigner,
    Watermark,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarksWithIdleness,
)
from tidegate.datastream import StreamExecutionEnvironment

MIN = -(2**63)


class Output(WatermarkOutput):
    def __init__(self) -> None:
        self.events: list = []

    def emit_watermark(self, watermark: Watermark) -> None:
        self.events.append(watermark.get_timestamp())

    def mark_idle(self) -> None:
        self.events.append("idle")

    def mark_active(self) -> None:
        self.events.append("active")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bounded_out_of_orderness_emits_the_highest_timestamp_minus_the_bound_minus_one():
    gen = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_seconds(2)
    ).create_watermark_generator()
    out = Output()
    for ts in (5_000, 9_000, 7_000):
        gen.on_event(None, ts, out)
    gen.on_periodic_emit(out)
    assert out.events == [9_000 - 2_000 - 1]


def test_before_any_record_the_bounded_generator_emits_the_minimum_watermark():
    out = Output()
    BoundedOutOfOrdernessWatermarks(1_000).on_periodic_emit(out)
    assert out.events == [MIN]


def test_monotonous_timestamps_trail_the_highest_timestamp_by_one_millisecond():
    gen = WatermarkStrategy.for_monotonous_timestamps().create_watermark_generator()
    out = Output()
    gen.on_event(None, 42, out)
    gen.on_periodic_emit(out)
    assert out.events == [41]


def test_no_watermarks_emits_nothing():
    strategy = WatermarkStrategy.no_watermarks()
    gen = strategy.create_watermark_generator()
    out = Output()
    gen.on_event(None, 42, out)
    gen.on_periodic_emit(out)
    assert out.events == [] and not strategy.generates_watermarks


def test_with_idleness_marks_the_output_idle_after_the_timeout_without_records():
    clock = Clock()
    gen = WatermarksWithIdleness(BoundedOutOfOrdernessWatermarks(0), 1_000, clock)
    out = Output()
    gen.on_event(None, 10, out)
    gen.on_periodic_emit(out)  # activity since the last check: a watermark
    clock.now += 0.5
    gen.on_periodic_emit(out)  # quiet: the idle timer starts
    clock.now += 0.6
    gen.on_periodic_emit(out)  # still quiet, but 0.6 s < 1 s since the timer started
    clock.now += 0.5
    gen.on_periodic_emit(out)  # 1.1 s without records: idle
    gen.on_event(None, 20, out)
    gen.on_periodic_emit(out)  # a record came: watermarks again
    assert out.events == [9, 9, 9, "idle", 19]


def test_with_idleness_keeps_the_strategy_and_wraps_its_generator():
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_seconds(1))
    assert strategy.idleness_ms == 1_000
    assert isinstance(strategy.create_watermark_generator(), WatermarksWithIdleness)


def test_a_custom_generator_comes_from_for_generator_once_per_call():
    class EveryTenth(WatermarkGenerator):
        def on_event(self, event, event_timestamp, output):
            if event % 10 == 0:
                output.emit_watermark(Watermark(event_timestamp))

    strategy = WatermarkStrategy.for_generator(EveryTenth)
    first, second = strategy.create_watermark_generator(), strategy.create_watermark_generator()
    assert first is not second
    out = Output()
    for v in (3, 10, 11, 20):
        first.on_event(v, v * 100, out)
    assert out.events == [1_000, 2_000]


def test_a_timestamp_assigner_is_called_with_the_value_and_the_previous_timestamp():
    class FromField(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value["t"] + (0 if record_timestamp == MIN else record_timestamp)

    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(FromField())
    extract = strategy.create_timestamp_assigner()
    assert extract({"t": 5}, MIN) == 5 and extract({"t": 5}, 100) == 105


def test_a_plain_callable_is_accepted_as_a_timestamp_assigner():
    strategy = WatermarkStrategy.no_watermarks().with_timestamp_assigner(lambda v, _ts: v[1])
    assert strategy.create_timestamp_assigner()(("a", 7), MIN) == 7


def test_bad_strategy_arguments_are_refused_with_the_fix():
    with pytest.raises(TypeError, match="Duration"):
        WatermarkStrategy.for_bounded_out_of_orderness("5s")
    with pytest.raises(ValueError, match=">= 0"):
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(-1))
    with pytest.raises(ValueError, match="> 0"):
        WatermarkStrategy.no_watermarks().with_idleness(Duration.of_millis(0))
    with pytest.raises(TypeError, match="TimestampAssigner"):
        WatermarkStrategy.no_watermarks().with_timestamp_assigner(42)
    with pytest.raises(TypeError, match="callable"):
        WatermarkStrategy.for_generator(42)


def test_the_auto_watermark_interval_defaults_to_200_ms_and_reads_durations():
    env = StreamExecutionEnvironment.get_execution_environment()
    config = env.get_config()
    assert config.get_auto_watermark_interval() == 200
    assert config.set_auto_watermark_interval(50).get_auto_watermark_interval() == 50
    env.configure(Configuration().set_string("pipeline.auto-watermark-interval", "2 s"))
    assert config.get_auto_watermark_interval() == 2_000
    env.configure(Configuration().set_string("pipeline.auto-watermark-interval", "0"))
    assert config.get_auto_watermark_interval() == 0
    env.configure(Configuration().set_string("pipeline.auto-watermark-interval", "soon"))
    with pytest.raises(ValueError, match="200 ms"):
        config.get_auto_watermark_interval()


def test_the_strategy_is_importable_from_pyflinks_paths():
    from tidegate.common.time import Duration as DurationAtPath
    from tidegate.common.watermark_strategy import TimestampAssigner as AtPath
    from tidegate.common.watermark_strategy import WatermarkStrategy as StrategyAtPath

    assert StrategyAtPath is WatermarkStrategy and DurationAtPath is Duration
    assert AtPath is TimestampAssigner

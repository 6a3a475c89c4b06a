"""The window API builds jobs with PyFlink's names and refuses bad input with clear errors
(no job runs here: graph building only)."""

from __future__ import annotations

import pytest

from tidegate.datastream import AllWindowedStream, StreamExecutionEnvironment, WindowedStream
from tidegate.datastream.window import (
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    EventTimeSessionWindows,
    GlobalWindows,
    TumblingEventTimeWindows,
)


class NotMerging(CountTrigger):
    def can_merge(self):
        return False


@pytest.fixture
def stream():
    env = StreamExecutionEnvironment.get_execution_environment()
    return env.from_collection([("a", 1), ("b", 2)])


def test_window_count_window_and_window_all_return_pyflinks_windowed_streams(stream):
    keyed = stream.key_by(lambda r: r[0])
    assert isinstance(keyed.window(TumblingEventTimeWindows.of(10)), WindowedStream)
    assert isinstance(keyed.count_window(3), WindowedStream)
    assert isinstance(stream.window_all(TumblingEventTimeWindows.of(10)), AllWindowedStream)
    result = keyed.window(TumblingEventTimeWindows.of(10)).reduce(lambda a, b: a).uid("w")
    assert result.get_name() == "Window(Reduce)"
    everything = stream.window_all(GlobalWindows.create()).trigger(CountTrigger.of(2))
    assert everything.apply(lambda window, inputs: inputs).get_parallelism() == 1


def test_a_count_window_uses_pyflinks_count_window_assigners(stream):
    windowed = stream.key_by(lambda r: r[0]).count_window(3)
    assert isinstance(windowed._spec.assigner, CountTumblingWindowAssigner)
    sliding = stream.key_by(lambda r: r[0]).count_window(3, 1)
    assert isinstance(sliding._spec.assigner, CountSlidingWindowAssigner)
    assert (sliding._spec.assigner.window_size, sliding._spec.assigner.window_slide) == (3, 1)


def test_bad_window_arguments_fail_with_clear_errors(stream):
    keyed = stream.key_by(lambda r: r[0])
    with pytest.raises(TypeError, match="WindowAssigner"):
        keyed.window(10)
    sessions = keyed.window(EventTimeSessionWindows.with_gap(5))
    with pytest.raises(ValueError, match="merge"):
        sessions.trigger(NotMerging(2))
    windowed = keyed.window(TumblingEventTimeWindows.of(10))
    with pytest.raises(ValueError, match=">= 0"):
        windowed.allowed_lateness(-1)
    with pytest.raises(TypeError, match="OutputTag"):
        windowed.side_output_late_data("late")
    with pytest.raises(TypeError, match="AggregateFunction"):
        windowed.aggregate(object())
    with pytest.raises(TypeError, match="ProcessWindowFunction"):
        windowed.process(lambda *a: a)
    with pytest.raises(ValueError, match="size must be an int > 0"):
        keyed.count_window(0)


def test_a_window_join_needs_where_then_equal_to_before_window(stream):
    other = stream.map(lambda r: r)
    with pytest.raises(ValueError, match="where"):
        stream.join(other).equal_to(lambda r: r[0])
    with pytest.raises(ValueError, match="equal_to"):
        stream.co_group(other).where(lambda r: r[0]).window(TumblingEventTimeWindows.of(10))
    joined = (
        stream.join(other)
        .where(lambda r: r[0])
        .equal_to(lambda r: r[0])
        .window(TumblingEventTimeWindows.of(10))
        .apply(lambda a, b: (a, b))
    )
    assert joined.get_name() == "Window(Apply)"

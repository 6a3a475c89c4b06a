"""ConnectedStreams (PyFlink's name; `DataStream.connect(other)`) and Flink's interval join
(`KeyedStream.interval_join(other)`: not in PyFlink, Flink Java's API in snake_case).

    first.connect(second).map(CoMapFunction)           # map1 / map2
    first.connect(second).flat_map(CoFlatMapFunction)  # flat_map1 / flat_map2
    first.connect(second).process(CoProcessFunction)
    first.key_by(k1).connect(second.key_by(k2)).process(KeyedCoProcessFunction)
    first.connect(second).key_by(k1, k2).process(KeyedCoProcessFunction)
    left.key_by(k1).interval_join(right.key_by(k2)).between(Time.milliseconds(-5),
        Time.milliseconds(10)).process(ProcessJoinFunction)

Both build a two-input operator (runtime/co_process.py, runtime/interval_join.py): input 1 is
the stream `connect`/`interval_join` is called on. Barrier alignment covers the channels of
both inputs and the operator's watermark is the minimum of both inputs'.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from tidegate.common.typeinfo import TypeInformation, as_type_info
from tidegate.datastream.co_functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    ProcessJoinFunction,
)
from tidegate.runtime.co_process import CoProcessOperator
from tidegate.runtime.interval_join import IntervalJoinOperator

if TYPE_CHECKING:
    from tidegate.datastream.data_stream import DataStream, KeyedStream

__all__ = ["ConnectedStreams", "IntervalJoin", "IntervalJoined"]


class _Single:
    """`value -> (function(value),)`: a CoMapFunction's map1/map2 in the operator's shape."""

    def __init__(self, call: Any) -> None:
        self.call = call

    def __call__(self, value: Any, _ctx: Any) -> tuple[Any]:
        return (self.call(value),)


class _Many:
    """`value -> function(value)`: a CoFlatMapFunction's flat_map1/flat_map2."""

    def __init__(self, call: Any) -> None:
        self.call = call

    def __call__(self, value: Any, _ctx: Any) -> Any:
        return self.call(value)


def _check(func: Any, cls: type, what: str) -> None:
    if not isinstance(func, cls):
        raise TypeError(f"ConnectedStreams.{what}() expects a {cls.__name__}, got {func!r}")


class ConnectedStreams:
    """Two streams, possibly of different types, processed by one two-input operator."""

    def __init__(self, stream1: DataStream, stream2: DataStream) -> None:
        if stream1._env is not stream2._env:
            raise ValueError("connect() streams of one StreamExecutionEnvironment")
        self.stream1, self.stream2 = stream1, stream2

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None) -> Any:
        """Key both inputs (their keys must be comparable: equal keys meet in one subtask)."""
        return ConnectedStreams(
            self.stream1.key_by(key_selector1), self.stream2.key_by(key_selector2)
        )

    def _selectors(self) -> tuple[Any, Any]:
        s1, s2 = self.stream1._key_selector(), self.stream2._key_selector()
        if (s1 is None) != (s2 is None):
            raise ValueError(
                "only one of the connected streams is keyed: connect two KeyedStreams, or "
                "key both with ConnectedStreams.key_by(key_selector1, key_selector2)"
            )
        return s1, s2

    def map(self, func: CoMapFunction, output_type: Any = None) -> DataStream:
        _check(func, CoMapFunction, "map")
        out = as_type_info(output_type, "map(output_type=...)")
        return self._add("co_map", "Co-Map", func, _Single(func.map1), _Single(func.map2), out)

    def flat_map(self, func: CoFlatMapFunction, output_type: Any = None) -> DataStream:
        _check(func, CoFlatMapFunction, "flat_map")
        calls = _Many(func.flat_map1), _Many(func.flat_map2)
        out = as_type_info(output_type, "flat_map(output_type=...)")
        return self._add("co_flat_map", "Co-Flat Map", func, *calls, out)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        keyed = self._selectors()[0] is not None
        if isinstance(func, KeyedCoProcessFunction) and not keyed:
            raise TypeError(
                "a KeyedCoProcessFunction needs two keyed streams: connect two KeyedStreams "
                "or call key_by(key_selector1, key_selector2) first"
            )
        if not isinstance(func, KeyedCoProcessFunction | CoProcessFunction):
            raise TypeError(
                "ConnectedStreams.process() expects a CoProcessFunction or a "
                f"KeyedCoProcessFunction, got {func!r}"
            )
        name = "KeyedCoProcess" if keyed else "Co-Process"
        out = as_type_info(output_type, "process(output_type=...)")
        calls = func.process_element1, func.process_element2
        return self._add("co_process", name, func, *calls, out)

    def _add(
        self,
        kind: str,
        name: str,
        func: Any,
        call1: Any,
        call2: Any,
        output_type: TypeInformation | None,
    ) -> DataStream:
        s1, s2 = self._selectors()
        op = partial(CoProcessOperator, func, call1, call2, s1, s2)
        keyed = s1 is not None
        return _two_input(self.stream1, self.stream2, kind, name, op, keyed, output_type)


def _two_input(
    first: DataStream,
    second: DataStream,
    kind: str,
    name: str,
    op: Any,
    keyed: bool,
    output_type: TypeInformation | None,
) -> DataStream:
    inputs1, inputs2 = list(first._inputs), list(second._inputs)
    return first._add(
        kind,
        name,
        op,
        inputs=inputs1 + inputs2,
        keyed=keyed,
        input_indices=(0,) * len(inputs1) + (1,) * len(inputs2),
        output_type=output_type,
    )


def _millis(bound: Any, what: str) -> int:
    if isinstance(bound, int) and not isinstance(bound, bool):
        return bound
    to_ms = getattr(bound, "to_milliseconds", None)
    if to_ms is None:
        raise TypeError(
            f"between() takes Time.milliseconds(...)-style durations or int ms; {what} is {bound!r}"
        )
    return int(to_ms())


def _check_tag(output_tag: Any) -> Any:
    if not hasattr(output_tag, "tag_id"):
        raise TypeError(f"expected an OutputTag for the late data, got {output_tag!r}")
    return output_tag


class IntervalJoin:
    """`keyed.interval_join(other_keyed)`: give the bounds with `between(lower, upper)`."""

    def __init__(self, left: KeyedStream, right: KeyedStream) -> None:
        if getattr(right, "_key_selector", lambda: None)() is None:
            raise TypeError(
                "interval_join() takes a KeyedStream: key the other stream with key_by(...)"
            )
        if left._env is not right._env:
            raise ValueError("interval_join() streams of one StreamExecutionEnvironment")
        self.left, self.right = left, right

    def between(self, lower_bound: Any, upper_bound: Any) -> IntervalJoined:
        """A right record joins a left one with timestamp t if its timestamp is within
        [t + lower_bound, t + upper_bound] (both inclusive unless made exclusive)."""
        lower, upper = _millis(lower_bound, "lower_bound"), _millis(upper_bound, "upper_bound")
        if lower > upper:
            raise ValueError(
                f"between(lower_bound, upper_bound): lower_bound ({lower} ms) must not be above "
                f"upper_bound ({upper} ms)"
            )
        return IntervalJoined(self.left, self.right, lower, upper)


class IntervalJoined:
    """An interval join with its bounds; `process(ProcessJoinFunction)` adds the operator."""

    def __init__(self, left: KeyedStream, right: KeyedStream, lower: int, upper: int) -> None:
        self.left, self.right = left, right
        self.lower_bound, self.upper_bound = lower, upper
        self._lower_exclusive = self._upper_exclusive = False
        self._late_tags: list[Any] = [None, None]

    def lower_bound_exclusive(self) -> IntervalJoined:
        self._lower_exclusive = True
        return self

    def upper_bound_exclusive(self) -> IntervalJoined:
        self._upper_exclusive = True
        return self

    def side_output_left_late_data(self, output_tag: Any) -> IntervalJoined:
        """Send left records that arrive behind the watermark to the side output
        `output_tag` (`joined.get_side_output(output_tag)`) instead of dropping them."""
        self._late_tags[0] = _check_tag(output_tag)
        return self

    def side_output_right_late_data(self, output_tag: Any) -> IntervalJoined:
        """The same for late right records."""
        self._late_tags[1] = _check_tag(output_tag)
        return self

    def process(self, process_join_function: Any, output_type: Any = None) -> DataStream:
        func = process_join_function
        if not isinstance(func, ProcessJoinFunction):
            raise TypeError(f"IntervalJoined.process() expects a ProcessJoinFunction, got {func!r}")
        lower = self.lower_bound + (1 if self._lower_exclusive else 0)
        upper = self.upper_bound - (1 if self._upper_exclusive else 0)
        if lower > upper:
            raise ValueError(
                f"interval join: no timestamp is within the exclusive bounds "
                f"({self.lower_bound}, {self.upper_bound}) ms"
            )
        s1, s2 = self.left._key_selector(), self.right._key_selector()
        op = partial(IntervalJoinOperator, func, s1, s2, lower, upper, *self._late_tags)
        out = as_type_info(output_type, "process(output_type=...)")
        return _two_input(self.left, self.right, "interval_join", "Interval Join", op, True, out)

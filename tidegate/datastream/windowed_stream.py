"""`WindowedStream` (`KeyedStream.window`, `count_window`) and `AllWindowedStream`
(`DataStream.window_all`) with PyFlink's methods: configure trigger, evictor, allowed lateness
and late-data side output, then apply `reduce`, `aggregate`, `apply` or `process`, which adds
the window operator (runtime/windows/operator.py) and returns the result stream.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from tidegate.common.time import to_millis
from tidegate.common.typeinfo import TypeInformation, as_type_info
from tidegate.datastream.core_functions import AggregateFunction
from tidegate.runtime.windows.assigners import (
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    WindowAssigner,
)
from tidegate.runtime.windows.contents import Aggregation, InternalWindowFunction
from tidegate.runtime.windows.operator import WindowOperator, WindowSpec

if TYPE_CHECKING:
    from tidegate.datastream.data_stream import DataStream, KeyedStream

_AGGREGATE_METHODS = ("create_accumulator", "add", "get_result")


def _check_assigner(assigner: Any) -> None:
    if not callable(getattr(assigner, "assign_windows", None)):
        raise TypeError(
            f"window() expects a WindowAssigner (e.g. TumblingEventTimeWindows.of(Time.seconds"
            f"(5))), got {type(assigner).__name__}"
        )


def _reduce_callable(function: Any) -> Any:
    call = getattr(function, "reduce", function)
    if not callable(call):
        raise TypeError(f"reduce expects a ReduceFunction or a callable, got {function!r}")
    return function


class _Windowed:
    """What WindowedStream and AllWindowedStream share."""

    _keyed_kinds = ("process", "apply")

    def __init__(self, stream: KeyedStream, assigner: WindowAssigner, *, all_: bool) -> None:
        _check_assigner(assigner)
        self._stream = stream
        self._all = all_
        self._spec = WindowSpec(assigner)

    def get_execution_environment(self) -> Any:
        """The StreamExecutionEnvironment of the windowed stream."""
        return self._stream.get_execution_environment()

    def trigger(self, trigger: Any) -> Any:
        """Replace the assigner's default trigger."""
        if hasattr(self._spec.assigner, "merge_windows") and not trigger.can_merge():
            raise ValueError(
                "a merging (session) assigner needs a trigger that can merge (can_merge())"
            )
        self._spec.trigger = trigger
        return self

    def evictor(self, evictor: Any) -> Any:
        """Remove elements before/after the window function (the window keeps its elements,
        so reduce/aggregate run when the window fires)."""
        self._spec.evictor = evictor
        return self

    def allowed_lateness(self, time_ms: Any) -> Any:
        """Keep event-time windows this long (ms or Time) after their end: late elements in
        that time fire the window again."""
        lateness = to_millis(time_ms, "allowed_lateness")
        if lateness < 0:
            raise ValueError(f"allowed_lateness must be >= 0, got {lateness}")
        self._spec.allowed_lateness = lateness
        return self

    def side_output_late_data(self, output_tag: Any) -> Any:
        """Send elements too late for every window to `output_tag` (read it with
        `get_side_output(output_tag)` on the result)."""
        if not isinstance(getattr(output_tag, "tag_id", None), str):
            raise TypeError("side_output_late_data expects an OutputTag('name')")
        self._spec.late_data_tag = output_tag
        return self

    # functions ---------------------------------------------------------------------------------
    def _function(self, function: Any) -> InternalWindowFunction:
        if function is None:
            return InternalWindowFunction("pass")
        prefix = "all_" if self._all else ""
        if callable(getattr(function, "process", None)):
            return InternalWindowFunction(prefix + "process", function)
        if callable(getattr(function, "apply", function)):
            return InternalWindowFunction(prefix + "apply", function)
        raise TypeError(
            f"expected a ProcessWindowFunction or WindowFunction, got {type(function).__name__}"
        )

    def _build(
        self,
        name: str,
        function: InternalWindowFunction,
        aggregation: Any,
        output_type: TypeInformation | None,
    ) -> DataStream:
        spec = self._spec
        spec.function, spec.aggregation = function, aggregation
        stream = self._stream
        op = partial(WindowOperator, spec, stream._selector)
        result = stream._add("window", name, op, keyed=True, output_type=output_type)
        if self._all:
            result.set_parallelism(1)
        return result

    def reduce(self, reduce_function: Any, window_function: Any = None, output_type: Any = None):
        """Reduce each window incrementally; with `window_function`, it gets the one result."""
        aggregation = Aggregation(reduce_function=_reduce_callable(reduce_function))
        out = as_type_info(output_type, "reduce(output_type=...)")
        if window_function is None and out is None:
            out = self._stream._declared_type()  # the reduced records are the input's
        return self._build("Window(Reduce)", self._function(window_function), aggregation, out)

    def aggregate(
        self,
        aggregate_function: Any,
        window_function: Any = None,
        accumulator_type: Any = None,
        output_type: Any = None,
    ) -> DataStream:
        """Aggregate each window incrementally (AggregateFunction; sessions also need its
        `merge`, and sliding windows use it to merge their slices); with `window_function`, it
        gets the one result."""
        missing = [m for m in _AGGREGATE_METHODS if not callable(getattr(aggregate_function, m, 0))]
        if missing:
            raise TypeError(f"aggregate expects an AggregateFunction; it lacks {missing}")
        merge = getattr(type(aggregate_function), "merge", None)
        mergeable = callable(merge) and merge is not AggregateFunction.merge
        aggregation = Aggregation(aggregate_function=aggregate_function, mergeable=mergeable)
        as_type_info(accumulator_type, "aggregate(accumulator_type=...)")
        out = as_type_info(output_type, "aggregate(output_type=...)")
        return self._build("Window(Aggregate)", self._function(window_function), aggregation, out)

    def apply(self, window_function: Any, output_type: Any = None) -> DataStream:
        """A WindowFunction (AllWindowFunction) over all elements of each window."""
        out = as_type_info(output_type, "apply(output_type=...)")
        return self._build("Window(Apply)", self._function(window_function), None, out)

    def process(self, process_window_function: Any, output_type: Any = None) -> DataStream:
        """A ProcessWindowFunction (ProcessAllWindowFunction) over all elements."""
        if not callable(getattr(process_window_function, "process", None)):
            raise TypeError("process expects a ProcessWindowFunction")
        out = as_type_info(output_type, "process(output_type=...)")
        return self._build("Window(Process)", self._function(process_window_function), None, out)


class WindowedStream(_Windowed):
    """`key_by(...).window(assigner)`: windows per key."""

    def __init__(self, keyed_stream: KeyedStream, window_assigner: WindowAssigner) -> None:
        super().__init__(keyed_stream, window_assigner, all_=False)


class AllWindowedStream(_Windowed):
    """`window_all(assigner)`: windows over the whole stream, in one subtask."""

    def __init__(self, data_stream: DataStream, window_assigner: WindowAssigner) -> None:
        keyed = data_stream.key_by(_all_key)
        super().__init__(keyed, window_assigner, all_=True)


def _all_key(_value: Any) -> int:
    """window_all's one key."""
    return 0


def count_window(keyed_stream: KeyedStream, size: int, slide: int = 0) -> WindowedStream:
    """Windows of `size` elements per key, every `slide` elements (0: tumbling), as PyFlink
    builds them: CountTumblingWindowAssigner / CountSlidingWindowAssigner (CountWindow ids)."""
    if not isinstance(slide, int) or slide < 0:
        raise ValueError(f"count_window needs slide >= 0, got {slide!r}")
    if slide == 0:
        return WindowedStream(keyed_stream, CountTumblingWindowAssigner.of(size))
    return WindowedStream(keyed_stream, CountSlidingWindowAssigner.of(size, slide))

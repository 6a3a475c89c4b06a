"""Window join and coGroup of two streams (Flink's `JoinedStreams` / `CoGroupedStreams`):

    first.join(second).where(key1).equal_to(key2).window(assigner).apply(join_function)
    first.co_group(second).where(key1).equal_to(key2).window(assigner).apply(co_group_function)

Built as Flink builds them, from the public API: each input is tagged (`(0, value)` /
`(1, value)`, timestamps kept), the two are unioned and keyed by the key of either side, and a
window operator collects both sides of each key and window; when the window fires, the
coGroup function gets both sides' elements, the join function every pair (an inner join).
So it is checkpointed, restored and rescaled like any window, and the watermark is the minimum
of both inputs'.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from tidegate.datastream.core_functions import Function

if TYPE_CHECKING:
    from tidegate.datastream.data_stream import DataStream

__all__ = ["CoGroupFunction", "CoGroupedStreams", "JoinFunction", "JoinedStreams"]


class CoGroupFunction(Function):
    @abc.abstractmethod
    def co_group(self, first: list[Any], second: list[Any]) -> Any:
        """Both sides' elements of one key and window (one side may be empty); yield outputs."""


class JoinFunction(Function):
    @abc.abstractmethod
    def join(self, first: Any, second: Any) -> Any:
        """One pair of elements with equal keys in the same window; return the output."""


def _key_function(selector: Any, side: str) -> Any:
    call = getattr(selector, "get_key", selector)
    if not callable(call):
        raise TypeError(f"{side}() expects a KeySelector or a callable, got {selector!r}")
    return call


class _TaggedKey:
    """The key of a tagged element: the key selector of its side."""

    def __init__(self, first: Any, second: Any) -> None:
        self.first, self.second = first, second

    def __call__(self, tagged: tuple[int, Any]) -> Any:
        side, value = tagged
        return self.first(value) if side == 0 else self.second(value)


def _tag(side: int) -> Any:
    def tag(value: Any) -> tuple[int, Any]:
        return (side, value)

    return tag


class _CoGroupWindow:
    """The window function: splits a window's tagged elements by side."""

    def __init__(self, function: Any, join: bool) -> None:
        self.function = function
        self._join = join
        name = "join" if join else "co_group"
        self._call = getattr(function, name, function)
        if not callable(self._call):
            raise TypeError(f"apply() expects a {'Join' if join else 'CoGroup'}Function")

    def open(self, runtime_context: Any) -> None:
        if hasattr(self.function, "open"):
            self.function.open(runtime_context)

    def close(self) -> None:
        if hasattr(self.function, "close"):
            self.function.close()

    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        first = [v for side, v in inputs if side == 0]
        second = [v for side, v in inputs if side == 1]
        if not self._join:
            return self._call(first, second)
        return [self._call(a, b) for a in first for b in second]


class _TwoStreams:
    _join = False

    def __init__(self, first: DataStream, second: DataStream) -> None:
        self._first, self._second = first, second
        self._key1: Any = None
        self._key2: Any = None

    def where(self, key_selector: Any) -> Any:
        self._key1 = _key_function(key_selector, "where")
        return self

    def equal_to(self, key_selector: Any) -> Any:
        if self._key1 is None:
            raise ValueError("call where(key_selector) before equal_to(key_selector)")
        self._key2 = _key_function(key_selector, "equal_to")
        return self

    def window(self, window_assigner: Any) -> _WithWindow:
        if self._key2 is None:
            raise ValueError("call where(...).equal_to(...) before window(...)")
        tagged = self._first.map(_tag(0)).union(self._second.map(_tag(1)))
        keyed = tagged.key_by(_TaggedKey(self._key1, self._key2))
        return _WithWindow(keyed.window(window_assigner), self._join)


class _WithWindow:
    def __init__(self, windowed: Any, join: bool) -> None:
        self._windowed = windowed
        self._join = join

    def trigger(self, trigger: Any) -> _WithWindow:
        self._windowed.trigger(trigger)
        return self

    def evictor(self, evictor: Any) -> _WithWindow:
        self._windowed.evictor(evictor)
        return self

    def allowed_lateness(self, time_ms: Any) -> _WithWindow:
        self._windowed.allowed_lateness(time_ms)
        return self

    def apply(self, function: Any, output_type: Any = None) -> DataStream:
        """A JoinFunction (or callable `(a, b) -> out`) for join; a CoGroupFunction (or
        callable `(first, second) -> iterable`) for co_group."""
        return self._windowed.apply(_CoGroupWindow(function, self._join), output_type)


class JoinedStreams(_TwoStreams):
    """`first.join(second)`: an inner join of the two streams per key and window."""

    _join = True


class CoGroupedStreams(_TwoStreams):
    """`first.co_group(second)`: both sides' elements per key and window."""

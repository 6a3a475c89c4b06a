"""Window functions with PyFlink's names (`pyflink.datastream.functions`): the function a
`WindowedStream` / `AllWindowedStream` applies to a window's contents when it fires.

* `WindowFunction.apply(key, window, inputs)` / `AllWindowFunction.apply(window, inputs)`
* `ProcessWindowFunction.process(key, context, elements)` /
  `ProcessAllWindowFunction.process(context, elements)`: `context.window()`,
  `current_processing_time()`, `current_watermark()`, `window_state()` (keyed state scoped to
  the window), `global_state()` (keyed state of the key), `output(tag, value)`; `clear(context)`
  runs when the window is purged for good (clear `window_state()` there).

Each yields (or returns an iterable of) output records; None emits nothing.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from tidegate.datastream.core_functions import Function

IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")
W = TypeVar("W")

__all__ = [
    "AllWindowFunction",
    "ProcessAllWindowFunction",
    "ProcessWindowFunction",
    "WindowFunction",
]


class WindowFunction(Function, Generic[IN, OUT, KEY, W]):
    @abc.abstractmethod
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any] | None: ...


class AllWindowFunction(Function, Generic[IN, OUT, W]):
    @abc.abstractmethod
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any] | None: ...


class _WindowContext(abc.ABC, Generic[W]):
    @abc.abstractmethod
    def window(self) -> Any: ...

    @abc.abstractmethod
    def current_processing_time(self) -> int: ...

    @abc.abstractmethod
    def current_watermark(self) -> int: ...

    @abc.abstractmethod
    def window_state(self) -> Any: ...

    @abc.abstractmethod
    def global_state(self) -> Any: ...


class ProcessWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    Context = _WindowContext

    @abc.abstractmethod
    def process(
        self, key: Any, context: _WindowContext, elements: Iterable[Any]
    ) -> Iterable[Any] | None: ...

    def clear(self, context: _WindowContext) -> None:
        """The window is purged for good: clear what `context.window_state()` holds."""


class ProcessAllWindowFunction(Function, Generic[IN, OUT, W]):
    Context = _WindowContext

    @abc.abstractmethod
    def process(self, context: _WindowContext, elements: Iterable[Any]) -> Iterable[Any] | None: ...

    def clear(self, context: _WindowContext) -> None:
        """The window is purged for good: clear what `context.window_state()` holds."""


def _register_context() -> None:
    from tidegate.runtime.windows.contexts import WindowContext

    _WindowContext.register(WindowContext)


_register_context()

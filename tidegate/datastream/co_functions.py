"""User functions of two-input operators, with PyFlink's names (importable from
`tidegate.datastream.functions`, as in PyFlink): CoMapFunction, CoFlatMapFunction,
CoProcessFunction, KeyedCoProcessFunction, and ProcessJoinFunction (the interval join's; not in
PyFlink, Flink Java's `ProcessJoinFunction` in snake_case).

Input 1 is the stream `connect` was called on, input 2 the argument. `process_element1/2` and
`on_timer` yield (or return an iterable of) their outputs, as PyFlink's do.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

from tidegate.datastream.core_functions import Function, KeyedProcessFunction, ProcessFunction

__all__ = [
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "KeyedCoProcessFunction",
    "ProcessJoinFunction",
]


class CoMapFunction(Function):
    """One output per record of either input."""

    @abc.abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abc.abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(Function):
    """Zero or more outputs (an iterable, e.g. a generator) per record of either input."""

    @abc.abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any]: ...

    @abc.abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any]: ...


class CoProcessFunction(Function):
    """`process_element1/2(value, ctx)`: ctx.timestamp(), ctx.timer_service() (clocks only:
    timers need a KeyedCoProcessFunction), ctx.output(tag, value)."""

    class Context(ProcessFunction.Context, abc.ABC):
        pass

    @abc.abstractmethod
    def process_element1(self, value: Any, ctx: CoProcessFunction.Context) -> Any: ...

    @abc.abstractmethod
    def process_element2(self, value: Any, ctx: CoProcessFunction.Context) -> Any: ...


class KeyedCoProcessFunction(Function):
    """On two connected KeyedStreams: the record's key is current (keyed state through the
    runtime context, `ctx.get_current_key()`); timers through `ctx.timer_service()` call
    `on_timer(timestamp, ctx)` with their key current."""

    class Context(KeyedProcessFunction.Context, abc.ABC):
        pass

    class OnTimerContext(KeyedProcessFunction.OnTimerContext, abc.ABC):
        pass

    @abc.abstractmethod
    def process_element1(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Any: ...

    @abc.abstractmethod
    def process_element2(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Any: ...

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext) -> Any:
        return None


class ProcessJoinFunction(Function):
    """The interval join's function: `process_element(left, right, ctx)` per joined pair;
    ctx.get_left_timestamp(), get_right_timestamp(), get_timestamp() (the output's: the
    larger of both), output(tag, value)."""

    class Context(abc.ABC):
        @abc.abstractmethod
        def get_left_timestamp(self) -> int: ...

        @abc.abstractmethod
        def get_right_timestamp(self) -> int: ...

        @abc.abstractmethod
        def get_timestamp(self) -> int: ...

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None: ...

    @abc.abstractmethod
    def process_element(self, left: Any, right: Any, ctx: ProcessJoinFunction.Context) -> Any: ...


def _register_runtime_contexts() -> None:
    """The runtime's contexts implement these interfaces by shape; registering them makes
    `isinstance(ctx, KeyedCoProcessFunction.Context)` true, as in PyFlink."""
    from tidegate.runtime.context import ProcessContext
    from tidegate.runtime.interval_join import JoinContext
    from tidegate.runtime.timer_service import OnTimerContext

    CoProcessFunction.Context.register(ProcessContext)
    KeyedCoProcessFunction.Context.register(ProcessContext)
    KeyedCoProcessFunction.OnTimerContext.register(OnTimerContext)
    ProcessJoinFunction.Context.register(JoinContext)


_register_runtime_contexts()

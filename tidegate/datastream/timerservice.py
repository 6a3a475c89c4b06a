"""TimerService at PyFlink's import path (`pyflink.datastream.timerservice`).

The interface of `ctx.timer_service()` in a KeyedProcessFunction. The runtime implements it
(`tidegate.runtime.timer_service`) without importing this package; registering the
implementations here makes `isinstance(ctx.timer_service(), TimerService)` true, as in PyFlink.
"""

from __future__ import annotations

import abc

from tidegate.datastream.core_functions import KeyedProcessFunction


class TimerService(abc.ABC):
    """Timers and clocks of a keyed process function, for the current key. Timestamps are int
    milliseconds since the epoch; timers are deduplicated per key, timestamp and domain."""

    @abc.abstractmethod
    def current_processing_time(self) -> int:
        """The wall clock, in milliseconds."""

    @abc.abstractmethod
    def current_watermark(self) -> int:
        """The operator's current event-time watermark (-2**63 before any watermark)."""

    @abc.abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None:
        """`on_timer` runs once the wall clock reaches `timestamp`."""

    @abc.abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None:
        """`on_timer` runs once the watermark reaches `timestamp`."""

    @abc.abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Delete the current key's processing-time timer at `timestamp`, if there is one."""

    @abc.abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None:
        """Delete the current key's event-time timer at `timestamp`, if there is one."""


def _register_runtime_timer_services() -> None:
    from tidegate.runtime import timer_service

    TimerService.register(timer_service.TimerService)
    TimerService.register(timer_service.NonKeyedTimerService)
    KeyedProcessFunction.OnTimerContext.register(timer_service.OnTimerContext)


_register_runtime_timer_services()

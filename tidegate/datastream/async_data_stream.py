"""PyFlink's AsyncDataStream (`pyflink.datastream.async_data_stream`): applies an
AsyncFunction to a stream, many requests in flight per subtask (Flink's Async I/O). The
operator is runtime/async_io.py."""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any

from tidegate.common.time import to_millis
from tidegate.common.typeinfo import as_type_info
from tidegate.datastream.async_function import AsyncFunction
from tidegate.datastream.async_retry_strategies import NO_RETRY_STRATEGY, AsyncRetryStrategy
from tidegate.datastream.data_stream import DataStream
from tidegate.runtime.async_io import AsyncWaitOperator

__all__ = ["AsyncDataStream"]


class AsyncDataStream:
    """`unordered_wait` emits results as they complete (never across a watermark);
    `ordered_wait` in input order. `timeout` (Time/Duration or int ms; <= 0: none) bounds each
    request from its first attempt, retries included; `capacity` is the most requests in flight
    per subtask (when full, the input waits: backpressure). Results keep the input record's
    timestamp."""

    @staticmethod
    def unordered_wait(
        data_stream: DataStream,
        async_function: AsyncFunction,
        timeout: Any,
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        return AsyncDataStream._apply(
            data_stream,
            async_function,
            timeout,
            NO_RETRY_STRATEGY,
            capacity,
            output_type,
            ordered=False,
        )

    @staticmethod
    def unordered_wait_with_retry(
        data_stream: DataStream,
        async_function: AsyncFunction,
        timeout: Any,
        async_retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        return AsyncDataStream._apply(
            data_stream,
            async_function,
            timeout,
            async_retry_strategy,
            capacity,
            output_type,
            ordered=False,
        )

    @staticmethod
    def ordered_wait(
        data_stream: DataStream,
        async_function: AsyncFunction,
        timeout: Any,
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        return AsyncDataStream._apply(
            data_stream,
            async_function,
            timeout,
            NO_RETRY_STRATEGY,
            capacity,
            output_type,
            ordered=True,
        )

    @staticmethod
    def ordered_wait_with_retry(
        data_stream: DataStream,
        async_function: AsyncFunction,
        timeout: Any,
        async_retry_strategy: AsyncRetryStrategy,
        capacity: int = 100,
        output_type: Any = None,
    ) -> DataStream:
        return AsyncDataStream._apply(
            data_stream,
            async_function,
            timeout,
            async_retry_strategy,
            capacity,
            output_type,
            ordered=True,
        )

    @staticmethod
    def _apply(
        data_stream: DataStream,
        async_function: AsyncFunction,
        timeout: Any,
        retry_strategy: Any,
        capacity: int,
        output_type: Any,
        *,
        ordered: bool,
    ) -> DataStream:
        timeout_ms = to_millis(timeout, "the timeout of an async operator")
        _validate(async_function, timeout_ms, retry_strategy, capacity)
        make = partial(
            AsyncWaitOperator,
            async_function,
            timeout_ms=timeout_ms,
            capacity=int(capacity),
            ordered=ordered,
            retry_strategy=None if retry_strategy is NO_RETRY_STRATEGY else retry_strategy,
        )
        out = as_type_info(output_type, "AsyncDataStream(output_type=...)")
        return data_stream._add("async_wait", "Async Wait", make, output_type=out)


def _validate(async_function: Any, timeout_ms: int, retry_strategy: Any, capacity: Any) -> None:
    invoke = getattr(async_function, "async_invoke", None)
    if not inspect.iscoroutinefunction(invoke):
        raise TypeError(
            f"{type(async_function).__name__}.async_invoke must be declared 'async def' "
            "(an AsyncFunction whose async_invoke(value) returns a list of results)"
        )
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"the capacity of an async operator must be an int >= 1, got {capacity!r}")
    if retry_strategy is None:
        raise ValueError("the async retry strategy must not be None (use NO_RETRY_STRATEGY)")
    if retry_strategy is not NO_RETRY_STRATEGY:
        if timeout_ms <= 0:
            raise ValueError("a timeout (> 0) is required for async I/O with retries")
        if retry_strategy.get_retry_predicate() is None:
            raise ValueError(
                f"the retry predicate of {type(retry_strategy).__name__} must not be None"
            )

"""PyFlink's AsyncFunction (`pyflink.datastream.functions.AsyncFunction`): the user function
of Async I/O (see AsyncDataStream)."""

from __future__ import annotations

import abc
from typing import Any

from tidegate.datastream.core_functions import Function

__all__ = ["AsyncFunction"]


class AsyncFunction(Function):
    """Issues one asynchronous request per input record.

    `async_invoke(value)` is a coroutine (`async def`) returning the list of results for
    `value` (`[]` for none); it runs on an asyncio event loop of the operator's own, many at
    a time (up to the capacity). `open(runtime_context)` and `close()` run on that event loop's
    thread, so clients created in `open` belong to its loop.

    `timeout(value)` is called (on the task's thread) when a request did not complete within
    the timeout, counted from its first attempt and covering its retries; it returns the list
    of results to emit instead. By default it raises TimeoutError, which fails the job.
    """

    @abc.abstractmethod
    async def async_invoke(self, value: Any) -> list[Any]: ...

    def timeout(self, value: Any) -> list[Any]:
        raise TimeoutError("Async function call has timed out.")

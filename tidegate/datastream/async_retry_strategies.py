"""Retry strategies of Async I/O (PyFlink's `async_retry_strategies` and the AsyncRetryStrategy
and AsyncRetryPredicate interfaces of `pyflink.datastream.functions`; Flink's
`AsyncRetryStrategies` builders).

After an attempt of a request finished, the operator asks the strategy (runtime/async_queue.py,
`retry_delay_ms`): `can_retry(attempts)` with the number of attempts made so far, then the
result predicate (on the returned list) or the exception predicate (on the raised exception);
if it says retry, the next attempt starts after `get_backoff_time_millis(attempts)`. As in
Flink, `max_attempts` bounds the retries: `can_retry(n)` is `n <= max_attempts`, so a request
is invoked at most `max_attempts + 1` times. Every retry stays within the request's timeout,
which counts from the first attempt. A result that still matches when no retry is left is
emitted; an exception fails the job.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

__all__ = [
    "NO_RETRY_STRATEGY",
    "AsyncRetryPredicate",
    "AsyncRetryStrategies",
    "AsyncRetryStrategy",
    "ExponentialBackoffDelayRetryStrategy",
    "FixedDelayRetryStrategy",
    "NoRetryStrategy",
    "RetryPredicate",
]

ResultPredicate = Callable[[list], bool]
ExceptionPredicate = Callable[[BaseException], bool]


class AsyncRetryPredicate(abc.ABC):
    """When to retry: a result predicate and an exception predicate (either may be None)."""

    @abc.abstractmethod
    def result_predicate(self) -> ResultPredicate | None: ...

    @abc.abstractmethod
    def exception_predicate(self) -> ExceptionPredicate | None: ...


class AsyncRetryStrategy(abc.ABC):
    """Whether and when a request is attempted again."""

    @abc.abstractmethod
    def can_retry(self, current_attempts: int) -> bool: ...

    @abc.abstractmethod
    def get_backoff_time_millis(self, current_attempts: int) -> int: ...

    @abc.abstractmethod
    def get_retry_predicate(self) -> AsyncRetryPredicate: ...

    @staticmethod
    def no_retry() -> AsyncRetryStrategy:
        return NO_RETRY_STRATEGY

    @staticmethod
    def fixed_delay(
        max_attempts: int,
        backoff_time_millis: int,
        result_predicate: ResultPredicate | None = None,
        exception_predicate: ExceptionPredicate | None = None,
    ) -> AsyncRetryStrategy:
        return FixedDelayRetryStrategy(
            max_attempts, backoff_time_millis, result_predicate, exception_predicate
        )

    @staticmethod
    def exponential_backoff(
        max_attempts: int,
        initial_delay: int,
        max_retry_delay: int,
        multiplier: float,
        result_predicate: ResultPredicate | None = None,
        exception_predicate: ExceptionPredicate | None = None,
    ) -> AsyncRetryStrategy:
        return ExponentialBackoffDelayRetryStrategy(
            max_attempts,
            initial_delay,
            max_retry_delay,
            multiplier,
            result_predicate,
            exception_predicate,
        )


class RetryPredicate(AsyncRetryPredicate):
    def __init__(
        self,
        result_predicate: ResultPredicate | None,
        exception_predicate: ExceptionPredicate | None,
    ) -> None:
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def result_predicate(self) -> ResultPredicate | None:
        return self._result_predicate

    def exception_predicate(self) -> ExceptionPredicate | None:
        return self._exception_predicate


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be greater than zero, got {value}")


class NoRetryStrategy(AsyncRetryStrategy):
    def can_retry(self, current_attempts: int) -> bool:
        return False

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(None, None)


class FixedDelayRetryStrategy(AsyncRetryStrategy):
    """Up to `max_attempts` retries, `backoff_time_millis` apart."""

    def __init__(
        self,
        max_attempts: int,
        backoff_time_millis: int,
        result_predicate: ResultPredicate | None = None,
        exception_predicate: ExceptionPredicate | None = None,
    ) -> None:
        _positive("max_attempts", max_attempts)
        _positive("backoff_time_millis", backoff_time_millis)
        self.max_attempts = int(max_attempts)
        self.backoff_time_millis = int(backoff_time_millis)
        self._predicate = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self.max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return self.backoff_time_millis

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return self._predicate


class ExponentialBackoffDelayRetryStrategy(AsyncRetryStrategy):
    """Up to `max_attempts` retries; the n-th waits `initial_delay * multiplier**(n-1)` ms, at
    most `max_retry_delay` (a function of the attempt alone, the same for every request)."""

    def __init__(
        self,
        max_attempts: int,
        initial_delay: int,
        max_retry_delay: int,
        multiplier: float,
        result_predicate: ResultPredicate | None = None,
        exception_predicate: ExceptionPredicate | None = None,
    ) -> None:
        _positive("max_attempts", max_attempts)
        _positive("initial_delay", initial_delay)
        _positive("max_retry_delay", max_retry_delay)
        _positive("multiplier", multiplier)
        self.max_attempts = int(max_attempts)
        self.initial_delay = int(initial_delay)
        self.max_retry_delay = int(max_retry_delay)
        self.multiplier = float(multiplier)
        self._predicate = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self.max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        exponent = max(current_attempts - 1, 0)
        delay = self.initial_delay * self.multiplier**exponent
        return int(min(delay, self.max_retry_delay))

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return self._predicate


NO_RETRY_STRATEGY: AsyncRetryStrategy = NoRetryStrategy()


class _Builder:
    def __init__(self) -> None:
        self._result: ResultPredicate | None = None
        self._exception: ExceptionPredicate | None = None

    def if_result(self, result_predicate: ResultPredicate) -> Any:
        self._result = result_predicate
        return self

    def if_exception(self, exception_predicate: ExceptionPredicate) -> Any:
        self._exception = exception_predicate
        return self


class AsyncRetryStrategies:
    """Flink's builders: `AsyncRetryStrategies.FixedDelayRetryStrategyBuilder(3, 100)
    .if_result(AsyncRetryPredicates.EMPTY_RESULT_PREDICATE).build()`."""

    NO_RETRY_STRATEGY = NO_RETRY_STRATEGY

    class FixedDelayRetryStrategyBuilder(_Builder):
        def __init__(self, max_attempts: int, backoff_time_millis: int) -> None:
            super().__init__()
            self._args = (max_attempts, backoff_time_millis)

        def build(self) -> FixedDelayRetryStrategy:
            return FixedDelayRetryStrategy(*self._args, self._result, self._exception)

    class ExponentialBackoffDelayRetryStrategyBuilder(_Builder):
        def __init__(
            self, max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float
        ) -> None:
            super().__init__()
            self._args = (max_attempts, initial_delay, max_retry_delay, multiplier)

        def build(self) -> ExponentialBackoffDelayRetryStrategy:
            return ExponentialBackoffDelayRetryStrategy(*self._args, self._result, self._exception)

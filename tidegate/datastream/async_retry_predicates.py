"""Ready-made retry predicates of Async I/O (PyFlink's `async_retry_predicates`, Flink's
`AsyncRetryPredicates`): a result predicate gets the list an attempt returned, an exception
predicate the exception it raised; True means retry."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = [
    "AsyncRetryPredicates",
    "empty_result_predicate",
    "exception_type_predicate",
    "has_exception_predicate",
]


def empty_result_predicate(result: Any) -> bool:
    """Retry when the attempt returned no results (None or an empty list)."""
    return result is None or len(result) == 0


def has_exception_predicate(error: BaseException | None) -> bool:
    """Retry on any exception."""
    return error is not None


def exception_type_predicate(error: BaseException | None, expected_error_type: type) -> bool:
    """Retry on an exception of `expected_error_type` (or a subclass)."""
    return isinstance(error, expected_error_type)


class AsyncRetryPredicates:
    """Flink's names for the predicates above."""

    EMPTY_RESULT_PREDICATE: Callable[[Any], bool] = staticmethod(empty_result_predicate)
    HAS_EXCEPTION_PREDICATE: Callable[[Any], bool] = staticmethod(has_exception_predicate)

    @staticmethod
    def exception_type_predicate(expected_error_type: type) -> Callable[[Any], bool]:
        """An exception predicate: retry on `expected_error_type` (or a subclass)."""
        return partial(exception_type_predicate, expected_error_type=expected_error_type)

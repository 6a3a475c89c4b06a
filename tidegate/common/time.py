"""`Duration` and `Time` with PyFlink's factory names; `to_millis` for arguments given as either."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class Duration:
    millis: int

    @staticmethod
    def of_millis(millis: int) -> Duration:
        return Duration(int(millis))

    @staticmethod
    def of_seconds(seconds: float) -> Duration:
        return Duration(int(seconds * 1000))

    @staticmethod
    def of_minutes(minutes: float) -> Duration:
        return Duration(int(minutes * 60_000))

    @staticmethod
    def of_hours(hours: float) -> Duration:
        return Duration(int(hours * 3_600_000))

    @staticmethod
    def of_days(days: float) -> Duration:
        return Duration(int(days * 86_400_000))

    def to_milliseconds(self) -> int:
        return self.millis


class Time:
    milliseconds = staticmethod(Duration.of_millis)
    seconds = staticmethod(Duration.of_seconds)
    minutes = staticmethod(Duration.of_minutes)
    hours = staticmethod(Duration.of_hours)
    days = staticmethod(Duration.of_days)


def to_millis(value: Any, what: str) -> int:
    """`Time`/`Duration` (anything with `to_milliseconds()`) or int ms -> int ms."""
    if hasattr(value, "to_milliseconds"):
        return int(value.to_milliseconds())
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(
        f"{what} must be a Time/Duration (e.g. Time.seconds(5)) or int milliseconds, "
        f"got {type(value).__name__} {value!r}"
    )

"""`WatermarkStrategy` (PyFlink's shape). Event time arrives in a later release; until then
`from_source` accepts a strategy and only `no_watermarks()` / `for_monotonous_timestamps()` /
`for_bounded_out_of_orderness()` are recorded for the job graph."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class WatermarkStrategy:
    kind: str
    max_out_of_orderness_ms: int = 0
    timestamp_assigner: Any = None
    idleness_ms: int | None = None

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        return WatermarkStrategy("none")

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        return WatermarkStrategy("monotonous")

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Any) -> WatermarkStrategy:
        ms = getattr(max_out_of_orderness, "to_milliseconds", lambda: int(max_out_of_orderness))()
        return WatermarkStrategy("bounded", max_out_of_orderness_ms=ms)

    def with_timestamp_assigner(self, timestamp_assigner: Any) -> WatermarkStrategy:
        return replace(self, timestamp_assigner=timestamp_assigner)

    def with_idleness(self, idle_timeout: Any) -> WatermarkStrategy:
        return replace(self, idleness_ms=idle_timeout.to_milliseconds())

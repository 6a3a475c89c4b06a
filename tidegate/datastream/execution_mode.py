"""`RuntimeExecutionMode`: how a job runs, PyFlink's `pyflink.datastream.RuntimeExecutionMode`.

* STREAMING (the default): records are processed as they arrive, with periodic checkpoints,
  watermarks and incremental results.
* BATCH: every source must be bounded. No periodic checkpoints (a failure restarts the job from
  its start; sinks commit once, at the end), no watermarks until the end of the input, when
  the watermark jumps to the end of time; rolling aggregations (`reduce`) emit only their final
  result per key; event-time and processing-time timers fire at the end of the input, so
  windows emit their final results once. The results equal a STREAMING run's final results.
* AUTOMATIC: BATCH if every source is bounded, else STREAMING.
"""

from __future__ import annotations

import enum

__all__ = ["RuntimeExecutionMode"]


class RuntimeExecutionMode(enum.Enum):
    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2

    @classmethod
    def parse(cls, value: str | RuntimeExecutionMode) -> RuntimeExecutionMode:
        """A mode from itself or its name in any case (`execution.runtime-mode`)."""
        if isinstance(value, RuntimeExecutionMode):
            return value
        try:
            return cls[str(value).strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown runtime execution mode {value!r}: use STREAMING, BATCH or AUTOMATIC"
            ) from None

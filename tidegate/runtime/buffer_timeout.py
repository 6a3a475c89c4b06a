"""The buffer timeout (Flink's `setBufferTimeout`): when a subtask sends the partly filled
output buffers of its record writers (runtime/network.py) downstream.

A record writer sends a channel's buffer as soon as it holds a full frame (`batch_size`
records) and before every event (barrier, watermark, end of input), whatever the timeout. The
timeout decides about partly filled buffers:

* `timeout_ms > 0`: they go out at the latest `timeout_ms` after the previous flush (Flink's
  output flusher), checked between two batches the subtask processes, and at once when its
  input runs dry (nothing else would join them). A record waits in a buffer at most about
  the timeout plus the time to process the batch it came from.
* `0`: after every batch the subtask processes (a source poll, an input frame): no record
  waits for a later batch. Records are processed a batch at a time, so those of one batch
  share a frame; operators chained to each other hand batches on directly, with no buffer.
* `-1`: only when full (or before an event): the most throughput, and latency bounded only by
  the input rate and the next event (with checkpointing on, the next barrier).

The decisions are pure (`now` passed in, from `time.monotonic()`); runtime/task.py applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IDLE_POLL_S", "BufferTimeout"]

#: how long an idle subtask waits for input before it looks at its clocks again (periodic
#: watermarks, an alignment timeout) when the buffer timeout gives no shorter wait
IDLE_POLL_S = 0.01


@dataclass(frozen=True, slots=True)
class BufferTimeout:
    #: seconds; None: flush only full buffers (-1)
    timeout_s: float | None

    @classmethod
    def of_millis(cls, timeout_ms: int) -> BufferTimeout:
        """From Flink's value: milliseconds >= 0, or -1 for "only when full"."""
        return cls(None if check_millis(timeout_ms) == -1 else timeout_ms / 1000)

    def flush_due(self, now: float, last_flush: float) -> bool:
        """Between two batches: send the partly filled buffers now?"""
        return self.timeout_s is not None and now - last_flush >= self.timeout_s

    @property
    def flush_when_idle(self) -> bool:
        """Send the partly filled buffers when the subtask's input runs dry?"""
        return self.timeout_s is not None

    @property
    def idle_wait_s(self) -> float:
        """The longest an idle subtask waits for input before it looks at its clocks again
        (nothing is buffered then, unless the timeout is -1, which never flushes on time)."""
        if self.timeout_s is None or self.timeout_s == 0:
            return IDLE_POLL_S
        return self.timeout_s


def check_millis(timeout_ms: int) -> int:
    """`timeout_ms` if it is a valid buffer timeout, else a ValueError saying what is."""
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < -1:
        raise ValueError(
            "the buffer timeout (execution.buffer-timeout) must be milliseconds >= 0, or -1 "
            f"to send buffers only when full, got {timeout_ms!r}"
        )
    return timeout_ms

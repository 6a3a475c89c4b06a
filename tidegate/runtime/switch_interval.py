"""The GIL switch interval of a slot's threads.

A slot process runs several threads that hand records to each other: a source subtask's loop,
a downstream subtask's loop, the receiver of the data connections. When one of them blocks
(a socket send or receive, a wait on its gate) it releases the GIL; when it wants it back while
another thread computes, it waits until that thread drops the GIL at the end of its switch
interval, 5 ms by default in CPython. Under load every hand-over can cost up to that much, and
a record crosses several: at 820k records/s (W1, p=2, 2 cores) p50 latency was 8.6-12.6 ms and
p99 39-65 ms with 5 ms, 2.7-3.1 and 16-31 ms with 0.5 ms (bench/README.md "Latency"), with
the same maximum throughput. So while its subtasks run, a slot sets the interval to
`tidegate.python.switch-interval-us` (default 500 microseconds; 0 keeps Python's) and restores
it after: a Spark Python worker may run other tasks next.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

__all__ = ["DEFAULT_SWITCH_INTERVAL_US", "check_switch_interval", "switch_interval"]

#: the slots' default (`tidegate.python.switch-interval-us`), microseconds
DEFAULT_SWITCH_INTERVAL_US = 500


def check_switch_interval(microseconds: int) -> int:
    """`microseconds` if it is a valid setting (0: Python's own), else a ValueError."""
    if microseconds < 0:
        raise ValueError(
            "tidegate.python.switch-interval-us must be 0 (keep Python's) or a positive "
            f"number of microseconds, got {microseconds}"
        )
    return microseconds


@contextlib.contextmanager
def switch_interval(microseconds: int) -> Iterator[None]:
    """Within: the GIL switch interval is `microseconds` (0: unchanged)."""
    if microseconds <= 0:
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(microseconds / 1e6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)

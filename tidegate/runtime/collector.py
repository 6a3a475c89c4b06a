"""Python's cyclic garbage collector, tuned for a slot's record loops.

By default CPython runs a young-generation collection every 700 net allocations of container
objects. A slot allocates a tuple or two per record (a map's result, a reduce's new value) and
keeps thousands alive in frames and queues, so collections run every few hundred records and
visit the same in-flight objects again and again: 12-15 % of a slot's CPU in the keyed count
of bench/compare.py (CPU time in `gc.callbacks`), while records almost never form reference
cycles (reference counting frees them). While its subtasks run, a slot therefore

- freezes what exists when they start (`gc.freeze`: the job's code, functions, graph, restored
  state), so no collection visits it again, and
- collects the young generation after `threshold` net allocations instead of 700: cyclic
  garbage a user function makes is still collected, only in larger rounds (memory for it is
  bounded by the threshold), and the older generations keep their thresholds.

Both are undone when the slot's subtasks end: a Spark Python worker may run other tasks next.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: the default young-generation threshold of slots (`tidegate.python.gc-threshold`)
DEFAULT_GC_THRESHOLD = 50_000


def check_gc_threshold(threshold: int) -> int:
    """`threshold` if it is a valid setting (0: Python's own), else a ValueError saying so."""
    if threshold < 0:
        raise ValueError(
            f"tidegate.python.gc-threshold must be 0 (keep Python's) or a positive number of "
            f"allocations, got {threshold}"
        )
    return threshold


@contextlib.contextmanager
def tuned_collector(threshold: int) -> Iterator[None]:
    """Within: the objects that exist frozen, young collections every `threshold` allocations
    (0: nothing changed)."""
    if threshold <= 0:
        yield
        return
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()

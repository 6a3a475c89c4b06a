"""Cleanup of expired entries that are not being read: incremental, background sweep, snapshot.

* **Incremental** (`cleanup_incrementally(n, per_record)`, Flink's TtlIncrementalCleanup): every
  access of the state (and, with `per_record`, every record the operator processes) checks the
  next `n` entries of a lazy iterator over all keys (`backend.entries(name)`) and removes the
  expired ones. When the iterator ends, a new pass (a new iterator) goes on from the start.
* **Background sweep** (`cleanup_in_rocksdb_compact_filter(q)`): tidegate's equivalent of Flink's
  RocksDB compaction filter, on every backend. Between batches of the task loop it checks the
  next `q` entries (one clock reading per slice, like the filter's `queryTimeAfterNumEntries`);
  a new pass starts every min(ttl, periodic_compaction_time) of processing time.
* **Full snapshot** (`cleanup_full_snapshot()`): `snapshot_transformer` filters a state's stored
  values in the asynchronous phase of a checkpoint, so the files hold no expired entries.

Removal goes through the public state interface: the sweeper makes the key current on the
backend, asks the TTL state to remove that key's expired data, and restores the current key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tidegate.state.ttl.states import _TtlState
from tidegate.state.ttl.value import TtlValue

__all__ = ["Sweeper", "snapshot_transformer"]


class Sweeper:
    """Walks all keys of one TTL state in slices, removing expired data (one pass at a time).

    `entries(name)` must tolerate changes to the state while its iterator is alive (the heap
    backend's copies the listing; RocksDB's iterator reads a snapshot). A listed value may be
    stale: it is only a filter, the removal re-reads the live value under the key.
    """

    def __init__(self, backend: Any, state: _TtlState, clock: Callable[[], int]) -> None:
        self._backend = backend
        self._state = state
        self._clock = clock
        self._pass: Iterator[tuple[Any, Any]] | None = None
        #: processing time when the current (or last) pass started; None before the first
        self.pass_started: int | None = None

    @property
    def in_pass(self) -> bool:
        return self._pass is not None

    def start_pass(self) -> None:
        self._pass = iter(self._backend.entries(self._state.name))
        self.pass_started = self._clock()

    def step(self, count: int, wrap_around: bool = True) -> None:
        """Check the next `count` entries, starting a pass if none is running. When the pass
        ends first, a new one continues the count (once: `wrap_around`)."""
        if count <= 0:
            return
        started_here = self._pass is None
        if started_here:
            self.start_pass()
        now = self._clock()
        expired_keys = []
        entries, has_expired = self._pass, self._state.has_expired
        checked = 0
        while checked < count:
            entry = next(entries, None)  # type: ignore[arg-type]
            if entry is None:
                self._pass = None
                if started_here or not wrap_around:
                    break
                self.start_pass()
                entries, started_here = self._pass, True
                continue
            checked += 1
            key, stored = entry
            if has_expired(stored, now):
                expired_keys.append(key)
        if expired_keys:
            self._remove(expired_keys, now)

    def _remove(self, keys: list[Any], now: int) -> None:
        backend = self._backend
        saved = backend.current_key
        try:
            for key in keys:
                backend.current_key = key
                self._state.remove_expired(now)
        finally:
            backend.current_key = saved


class IncrementalCleanup:
    """`cleanup_incrementally`: a slice of `cleanup_size` entries per access (or record)."""

    def __init__(self, sweeper: Sweeper, cleanup_size: int) -> None:
        self._sweeper = sweeper
        self._size = cleanup_size
        self._running = False

    def state_accessed(self) -> None:
        # removals go through the TTL state, which would call back here: no recursion
        if self._running:
            return
        self._running = True
        try:
            self._sweeper.step(self._size)
        finally:
            self._running = False

    def records_processed(self, count: int) -> None:
        for _ in range(count):
            self.state_accessed()


class BackgroundSweep:
    """`cleanup_in_rocksdb_compact_filter`: a slice per batch while a pass runs; a new pass
    every `interval_ms` of processing time."""

    def __init__(self, sweeper: Sweeper, slice_size: int, interval_ms: int) -> None:
        self._sweeper = sweeper
        self._slice = slice_size
        self._interval = interval_ms

    def between_batches(self, now: int) -> None:
        sweeper = self._sweeper
        if not sweeper.in_pass:
            started = sweeper.pass_started
            if started is not None and now - started < self._interval:
                return
            sweeper.start_pass()
        sweeper.step(self._slice, wrap_around=False)


def snapshot_transformer(state: _TtlState, now: int) -> Callable[[Any], Any]:
    """The function applied to each stored value of `state` while a snapshot is written: the
    value without its expired parts, or None to leave the key out (Flink's
    TtlStateSnapshotTransformer). `now` is read in the synchronous phase."""
    expired = state._policy.expired

    def transform(stored: Any) -> Any:
        if isinstance(stored, TtlValue):
            return None if expired(stored, now) else stored
        if isinstance(stored, list):
            alive = [e for e in stored if not expired(e, now)]
            return alive or None
        if isinstance(stored, dict):
            alive_map = {k: v for k, v in stored.items() if not expired(v, now)}
            return alive_map or None
        return stored

    return transform

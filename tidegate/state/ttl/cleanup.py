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

import functools
from collections.abc import Callable, Iterator
from itertools import islice
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
        restarted = self._pass is None
        if restarted:
            self.start_pass()
        now = self._clock()
        limit = now - self._state._policy.ttl_ms  # last accessed at or before: expired
        has_expired = self._state.has_expired
        single = self._state.single_value  # one TtlValue per key: compare inline (hot)
        expired_keys: list[Any] = []
        while True:
            chunk = list(islice(self._pass, count))  # type: ignore[arg-type]
            if single:
                expired_keys += [key for key, stored in chunk if stored[1] <= limit]
            else:
                expired_keys += [key for key, stored in chunk if has_expired(stored, limit)]
            count -= len(chunk)
            if count == 0:
                break
            self._pass = None  # it ended
            if restarted or not wrap_around:
                break
            self.start_pass()
            restarted = True
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
    """`cleanup_incrementally`: a slice of `cleanup_size` entries per access (or record).

    Removals go to the wrapped state directly, never through the TTL state's methods, so an
    access never triggers a nested cleanup.
    """

    def __init__(self, sweeper: Sweeper, cleanup_size: int) -> None:
        self._sweeper = sweeper
        self._size = cleanup_size
        #: what the TTL state calls on every access
        self.state_accessed = functools.partial(sweeper.step, cleanup_size)

    def records_processed(self, count: int) -> None:
        step, size = self._sweeper.step, self._size
        for _ in range(count):
            step(size)


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

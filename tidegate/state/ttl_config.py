"""`StateTtlConfig`: time-to-live of keyed state, with PyFlink's names (`pyflink.datastream.state`).

Build one with `StateTtlConfig.new_builder(Time.seconds(10))...build()` and pass it to
`descriptor.enable_time_to_live(config)`. The defaults are Flink's: the last-access timestamp is
set on create and write, expired values are never returned, time is processing time, and
expired entries are also cleaned up in the background (incrementally, 5 entries per access).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from tidegate.common.time import Duration

__all__ = ["StateTtlConfig"]


#: Flink's default periodic compaction time of the RocksDB compaction filter cleanup
_THIRTY_DAYS = Duration.of_days(30)


class UpdateType(enum.Enum):
    """When the last-access timestamp of a value is refreshed (which prolongs its life)."""

    Disabled = 0  #: TTL is disabled: state does not expire
    OnCreateAndWrite = 1  #: set when the value is created and on every write
    OnReadAndWrite = 2  #: as OnCreateAndWrite, and also on every read


class StateVisibility(enum.Enum):
    """Whether an expired value that is still stored may be returned."""

    ReturnExpiredIfNotCleanedUp = 0  #: return it (once: the read cleans it up)
    NeverReturnExpired = 1  #: never return it


class TtlTimeCharacteristic(enum.Enum):
    """The time scale of TTL; only processing time exists (as in Flink)."""

    ProcessingTime = 0


class Strategies(enum.Enum):
    FULL_STATE_SCAN_SNAPSHOT = 0
    INCREMENTAL_CLEANUP = 1
    ROCKSDB_COMPACTION_FILTER = 2


@dataclass(frozen=True)
class EmptyCleanupStrategy:
    pass


@dataclass(frozen=True)
class IncrementalCleanupStrategy:
    """Check `cleanup_size` entries on every state access (and on every record if asked)."""

    cleanup_size: int
    run_cleanup_for_every_record_: bool = False

    def get_cleanup_size(self) -> int:
        return self.cleanup_size

    def run_cleanup_for_every_record(self) -> bool:
        return self.run_cleanup_for_every_record_


@dataclass(frozen=True)
class RocksdbCompactFilterCleanupStrategy:
    """The background sweep (tidegate's equivalent of Flink's RocksDB compaction filter)."""

    query_time_after_num_entries: int
    periodic_compaction_time: Duration = _THIRTY_DAYS

    def get_query_time_after_num_entries(self) -> int:
        return self.query_time_after_num_entries

    def get_periodic_compaction_time(self) -> Duration:
        return self.periodic_compaction_time


@dataclass(frozen=True)
class CleanupStrategies:
    """Which cleanups run besides the cleanup of an expired value when it is read."""

    strategies: dict[Strategies, Any] = field(default_factory=dict)
    is_cleanup_in_background_: bool = True

    Strategies = Strategies
    EmptyCleanupStrategy = EmptyCleanupStrategy
    IncrementalCleanupStrategy = IncrementalCleanupStrategy
    RocksdbCompactFilterCleanupStrategy = RocksdbCompactFilterCleanupStrategy

    def is_cleanup_in_background(self) -> bool:
        return self.is_cleanup_in_background_

    def in_full_snapshot(self) -> bool:
        return Strategies.FULL_STATE_SCAN_SNAPSHOT in self.strategies

    def get_incremental_cleanup_strategy(self) -> IncrementalCleanupStrategy | None:
        """The configured one; else Flink's heap default (5, False) while background cleanup is
        on. tidegate runs it on every backend (it only needs the backend's `entries`)."""
        default = IncrementalCleanupStrategy(5, False) if self.is_cleanup_in_background_ else None
        return self.strategies.get(Strategies.INCREMENTAL_CLEANUP, default)

    def get_rocksdb_compact_filter_cleanup_strategy(
        self,
    ) -> RocksdbCompactFilterCleanupStrategy | None:
        """The configured background sweep, or None (tidegate runs it only when configured)."""
        return self.strategies.get(Strategies.ROCKSDB_COMPACTION_FILTER)


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"StateTtlConfig: {name} must be an int >= {minimum}, got {value!r}")
    return value


def _duration(name: str, value: Any) -> Duration:
    if not isinstance(value, Duration):
        raise TypeError(
            f"StateTtlConfig: {name} must be a Time/Duration (e.g. Time.seconds(10)), got {value!r}"
        )
    return value


@dataclass(frozen=True)
class StateTtlConfig:
    """Time-to-live of a keyed state; see the module docstring and docs/guide.md "State TTL"."""

    _update_type: UpdateType
    _state_visibility: StateVisibility
    _ttl_time_characteristic: TtlTimeCharacteristic
    _ttl: Duration
    _cleanup_strategies: CleanupStrategies

    UpdateType = UpdateType
    StateVisibility = StateVisibility
    TtlTimeCharacteristic = TtlTimeCharacteristic
    CleanupStrategies = CleanupStrategies

    def __post_init__(self) -> None:
        if self._ttl.to_milliseconds() <= 0:
            raise ValueError(
                f"StateTtlConfig: the TTL must be positive, got {self._ttl.to_milliseconds()} ms"
            )

    @staticmethod
    def new_builder(ttl: Duration) -> StateTtlConfig.Builder:
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> UpdateType:
        return self._update_type

    def get_state_visibility(self) -> StateVisibility:
        return self._state_visibility

    def get_ttl(self) -> Duration:
        return self._ttl

    def get_ttl_time_characteristic(self) -> TtlTimeCharacteristic:
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type is not UpdateType.Disabled

    def get_cleanup_strategies(self) -> CleanupStrategies:
        return self._cleanup_strategies

    class Builder:
        """Builds a `StateTtlConfig`; every setter returns the builder."""

        def __init__(self, ttl: Duration) -> None:
            self._ttl = _duration("ttl", ttl)
            self._update_type = UpdateType.OnCreateAndWrite
            self._state_visibility = StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = TtlTimeCharacteristic.ProcessingTime
            self._is_cleanup_in_background = True
            self._strategies: dict[Strategies, Any] = {}

        def set_update_type(self, update_type: UpdateType) -> StateTtlConfig.Builder:
            if not isinstance(update_type, UpdateType):
                raise TypeError(
                    f"set_update_type expects a StateTtlConfig.UpdateType, got {update_type!r}"
                )
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(UpdateType.OnReadAndWrite)

        def set_state_visibility(self, state_visibility: StateVisibility) -> StateTtlConfig.Builder:
            if not isinstance(state_visibility, StateVisibility):
                raise TypeError(
                    "set_state_visibility expects a StateTtlConfig.StateVisibility, "
                    f"got {state_visibility!r}"
                )
            self._state_visibility = state_visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(
            self, ttl_time_characteristic: TtlTimeCharacteristic
        ) -> StateTtlConfig.Builder:
            if not isinstance(ttl_time_characteristic, TtlTimeCharacteristic):
                raise TypeError(
                    "set_ttl_time_characteristic expects StateTtlConfig.TtlTimeCharacteristic"
                    f".ProcessingTime, got {ttl_time_characteristic!r}"
                )
            self._ttl_time_characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> StateTtlConfig.Builder:
            return self.set_ttl_time_characteristic(TtlTimeCharacteristic.ProcessingTime)

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            """Leave expired entries out of full snapshots (checkpoints and savepoints)."""
            self._strategies[Strategies.FULL_STATE_SCAN_SNAPSHOT] = EmptyCleanupStrategy()
            return self

        def cleanup_incrementally(
            self, cleanup_size: int, run_cleanup_for_every_record: bool
        ) -> StateTtlConfig.Builder:
            """On every access of the state, check the next `cleanup_size` entries of a lazy
            iterator over all its keys and remove the expired ones; with
            `run_cleanup_for_every_record`, also after every record the operator processes."""
            _positive_int("cleanup_size", cleanup_size, minimum=0)
            self._strategies[Strategies.INCREMENTAL_CLEANUP] = IncrementalCleanupStrategy(
                cleanup_size, bool(run_cleanup_for_every_record)
            )
            return self

        def cleanup_in_rocksdb_compact_filter(
            self,
            query_time_after_num_entries: int,
            periodic_compaction_time: Duration = _THIRTY_DAYS,
        ) -> StateTtlConfig.Builder:
            """A background sweep of expired entries between batches of the task loop (the
            equivalent of Flink's RocksDB compaction filter, on every backend): it scans
            `query_time_after_num_entries` entries per batch, reading the clock once per slice,
            and starts a new pass every min(ttl, periodic_compaction_time)."""
            _positive_int("query_time_after_num_entries", query_time_after_num_entries)
            _duration("periodic_compaction_time", periodic_compaction_time)
            self._strategies[Strategies.ROCKSDB_COMPACTION_FILTER] = (
                RocksdbCompactFilterCleanupStrategy(
                    query_time_after_num_entries, periodic_compaction_time
                )
            )
            return self

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            """No default background cleanup (explicitly configured cleanups still run)."""
            self._is_cleanup_in_background = False
            return self

        def set_ttl(self, ttl: Duration) -> StateTtlConfig.Builder:
            self._ttl = _duration("ttl", ttl)
            return self

        def build(self) -> StateTtlConfig:
            return StateTtlConfig(
                self._update_type,
                self._state_visibility,
                self._ttl_time_characteristic,
                self._ttl,
                CleanupStrategies(dict(self._strategies), self._is_cleanup_in_background),
            )

"""State backends (PyFlink's names): where working state lives while the job runs.

A backend object is chosen with `env.set_state_backend(...)` or the `state.backend.type`
configuration key, travels with the job to the workers, and creates each keyed operator
subtask's keyed state backend there (`create_keyed_state_backend`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tidegate.common.configuration import (
    ROCKSDB_BLOCK_CACHE_SIZE,
    ROCKSDB_LOCALDIR,
    ROCKSDB_VALUE_CACHE_ENTRIES,
    ROCKSDB_WRITEBUFFER_COUNT,
    ROCKSDB_WRITEBUFFER_SIZE,
    STATE_BACKEND_CHANGELOG,
    STATE_BACKEND_INCREMENTAL,
    STATE_BACKEND_TYPE,
    Configuration,
)
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.rocksdb_instance import RocksDBOptions, parse_memory_size


@dataclass(frozen=True)
class HashMapStateBackend:
    """Keyed state in Python dicts on the heap of each worker; snapshots are written per key
    group to the checkpoint storage. Fast; state must fit in memory."""

    #: checkpoints write only the entries changed since the last completed checkpoint, into
    #: a chain of files rematerialized when it grows (savepoints stay canonical); None: the
    #: configuration's `state.backend.incremental` (default false)
    enable_incremental_checkpointing: bool | None = None

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self.enable_incremental_checkpointing)

    def with_configuration(self, configuration: Configuration) -> HashMapStateBackend:
        """This backend, with `state.backend.incremental` if it leaves it None."""
        if self.enable_incremental_checkpointing is not None:
            return self
        return replace(self, enable_incremental_checkpointing=_incremental(configuration))

    def create_keyed_state_backend(
        self, max_parallelism: int, key_group_range: range, **_scope: Any
    ) -> HeapKeyedStateBackend:
        return HeapKeyedStateBackend(
            max_parallelism, key_group_range, incremental=self.is_incremental_checkpoints_enabled()
        )


def _incremental(configuration: Configuration) -> bool:
    return configuration.get_boolean(STATE_BACKEND_INCREMENTAL, False)


@dataclass(frozen=True)
class EmbeddedRocksDBStateBackend:
    """Keyed state in an embedded RocksDB instance per keyed operator subtask, on the worker's
    local disk: state may be far larger than memory. Reads and writes (de)serialize values, so
    it is slower than `HashMapStateBackend`. Checkpoints and savepoints have the same canonical
    per-key-group format as the hashmap backend's: either backend restores the other's.

    Memory settings left None come from the configuration (`state.backend.rocksdb.*`), then
    the defaults (docs/configuration.md). Sizes are bytes or strings such as "64mb".
    """

    #: checkpoints upload only new SST files (savepoints stay canonical); None: the
    #: configuration's `state.backend.incremental` (default false)
    enable_incremental_checkpointing: bool | None = None
    #: LRU block cache per worker process, shared by its RocksDB instances (default 64mb)
    block_cache_size: int | str | None = None
    #: size of one memtable (default 16mb)
    write_buffer_size: int | str | None = None
    #: memtables per column family (default 2)
    write_buffer_count: int | None = None
    #: where instance directories are created on each worker (default: the system temp dir)
    local_dir: str | None = None
    #: keys per value, reducing or aggregating state whose values stay in memory as Python
    #: objects, read and written without pickling (default 1048576)
    value_cache_entries: int | None = None
    #: checkpoints persist the changed cached values as changelogs next to the last RocksDB
    #: checkpoint instead of writing them to RocksDB (state/rocksdb_changelog.py; implies
    #: incremental checkpoints); None: the configuration's `state.backend.changelog.enabled`
    #: (default false)
    enable_changelog: bool | None = None

    def __post_init__(self) -> None:
        self.rocksdb_options()  # bad sizes fail here, when the job is built

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self.enable_incremental_checkpointing)

    def with_configuration(self, configuration: Configuration) -> EmbeddedRocksDBStateBackend:
        """This backend with the settings it leaves None taken from `configuration`."""
        keys = {
            "block_cache_size": ROCKSDB_BLOCK_CACHE_SIZE,
            "write_buffer_size": ROCKSDB_WRITEBUFFER_SIZE,
            "write_buffer_count": ROCKSDB_WRITEBUFFER_COUNT,
            "local_dir": ROCKSDB_LOCALDIR,
            "value_cache_entries": ROCKSDB_VALUE_CACHE_ENTRIES,
        }
        changes = {
            name: configuration.get_string(key)
            for name, key in keys.items()
            if getattr(self, name) is None and configuration.get_string(key) is not None
        }
        if self.enable_incremental_checkpointing is None:
            changes["enable_incremental_checkpointing"] = _incremental(configuration)
        if self.enable_changelog is None:
            changes["enable_changelog"] = configuration.get_boolean(STATE_BACKEND_CHANGELOG, False)
        return replace(self, **changes) if changes else self

    def rocksdb_options(self) -> RocksDBOptions:
        defaults = RocksDBOptions()
        return RocksDBOptions(
            local_dir=self.local_dir,
            block_cache_size=_size(
                ROCKSDB_BLOCK_CACHE_SIZE, self.block_cache_size, defaults.block_cache_size
            ),
            write_buffer_size=_size(
                ROCKSDB_WRITEBUFFER_SIZE, self.write_buffer_size, defaults.write_buffer_size
            ),
            write_buffer_count=_count(
                ROCKSDB_WRITEBUFFER_COUNT, self.write_buffer_count, defaults.write_buffer_count
            ),
            value_cache_entries=_count(
                ROCKSDB_VALUE_CACHE_ENTRIES, self.value_cache_entries, defaults.value_cache_entries
            ),
        )

    def create_keyed_state_backend(
        self,
        max_parallelism: int,
        key_group_range: range,
        *,
        job_id: str = "",
        operator_uid: str = "keyed",
        subtask: int = 0,
        attempt: int = 0,
    ) -> Any:
        from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend

        return RocksDBKeyedStateBackend(
            max_parallelism,
            key_group_range,
            self.rocksdb_options(),
            job_id=job_id,
            operator_uid=operator_uid,
            subtask=subtask,
            attempt=attempt,
            incremental=self.is_incremental_checkpoints_enabled(),
            changelog=bool(self.enable_changelog),
        )


def _count(key: str, value: int | str | None, default: int) -> int:
    try:
        return default if value is None else int(value)
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {value!r}") from None


def _size(key: str, value: int | str | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, int):
        return value
    return parse_memory_size(key, value)


_BY_TYPE = {"hashmap": HashMapStateBackend, "rocksdb": EmbeddedRocksDBStateBackend}
STATE_BACKENDS = tuple(_BY_TYPE.values())


def resolve_state_backend(backend: Any, configuration: Configuration) -> Any:
    """The job's backend: the one set on the environment, else `state.backend.type`'s; it
    takes the settings it leaves None (incremental checkpoints, rocksdb's memory settings)
    from the configuration."""
    if backend is None:
        name = (configuration.get_string(STATE_BACKEND_TYPE) or "hashmap").strip().lower()
        if name not in _BY_TYPE:
            raise ValueError(
                f"unknown state backend {name!r} in {STATE_BACKEND_TYPE}: use 'hashmap' (the "
                "default) or 'rocksdb'"
            )
        backend = _BY_TYPE[name]()
    return backend.with_configuration(configuration)


__all__ = [
    "EmbeddedRocksDBStateBackend",
    "HashMapStateBackend",
    "resolve_state_backend",
]

"""The Spark-task side of writing a savepoint: DataFrame rows -> key groups -> one state file per
new subtask, in the canonical format (state/snapshot_format.py), checksummed as it is written.

`keyed_records` turns a state's rows into `(subtask, (state name, key, a, b))` pairs, so that a
`partitionBy(parallelism)` on the subtask brings every key group to the Spark task that writes
that subtask's file; `write_subtask_file` builds the tables and writes the file there.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.common.filesystems import FileSystems
from tidegate.state.handles import StateHandle, file_safe
from tidegate.state.keygroups import key_group_range, stable_hash, subtask_for_key_group
from tidegate.state.snapshot_format import KeyedStateSnapshot, write_state_file

__all__ = ["KeyedSpec", "SubtaskFiles", "keyed_records", "write_subtask_file"]

KEYED_KINDS = ("value", "list", "map", "reducing", "aggregating")


@dataclass(frozen=True)
class KeyedSpec:
    """One keyed state to bootstrap: which columns of the DataFrame hold what."""

    state_name: str
    kind: str
    key_column: str
    value_column: str
    #: map state: the column of the user keys
    user_key_column: str | None
    #: list state: the column ordering a key's elements (None: the rows' order)
    position_column: str | None
    #: the key/user-key/value columns hold pickled objects
    raw: bool

    def columns(self) -> list[str]:
        extra = self.user_key_column if self.kind == "map" else self.position_column
        return [c for c in (self.key_column, extra, self.value_column) if c is not None]


@dataclass(frozen=True)
class SubtaskFiles:
    """What the tasks of one bootstrapped operator need besides the rows."""

    uid: str
    directory: str
    parallelism: int
    max_parallelism: int
    #: every keyed state of the operator: name -> kind (each file declares all of them)
    keyed_kinds: Mapping[str, str]
    #: per new subtask: operator state name -> (mode, entries)
    operator_state: tuple[dict[str, tuple[str, list[Any]]], ...]
    #: the target directory's filesystem options
    filesystems: FileSystems


def keyed_records(
    spec: KeyedSpec, parallelism: int, max_parallelism: int, rows: Iterable[Any]
) -> Iterator[tuple[int, tuple[str, Any, Any, Any]]]:
    """(new subtask, (state name, key, extra, value)) for each row; extra is the user key
    (map state) or the position (list state). Runs in the Spark tasks reading the DataFrame."""
    for row in rows:
        key = _to_key(_load(row[0], spec.raw))
        if spec.kind in ("map", "list") and len(row) == 3:
            extra, value = row[1], row[2]
            if spec.kind == "map":
                extra = _to_key(_load(extra, spec.raw))
        else:
            extra, value = None, row[-1]
        value = _load(value, spec.raw) if spec.raw else _to_python(value)
        try:
            kg = stable_hash(key) % max_parallelism
        except TypeError as e:
            raise TypeError(
                f"key {key!r} of state {spec.state_name!r} (column {spec.key_column!r}) cannot "
                f"be a key: {e}"
            ) from None
        yield (
            subtask_for_key_group(kg, parallelism, max_parallelism),
            (
                spec.state_name,
                key,
                extra,
                value,
            ),
        )


def write_subtask_file(
    files: SubtaskFiles, subtask: int, records: Iterable[tuple[int, tuple[str, Any, Any, Any]]]
) -> Iterator[tuple[int, StateHandle]]:
    """Write the state file of new subtask `subtask` from its records (all its key groups);
    yields (subtask, state handle) for `_metadata`. Runs in the Spark task of the subtask."""
    tables = _build_tables(files.keyed_kinds, (record for _, record in records))
    operator = files.operator_state[subtask] or None
    if not tables and operator is None:
        return
    r = key_group_range(subtask, files.parallelism, files.max_parallelism)
    keyed = KeyedStateSnapshot(files.max_parallelism, r, tables) if tables else None
    storage = CheckpointStorage(files.directory, "state-processor", files.filesystems)
    stem = f"{file_safe(files.uid)}-{subtask}"
    with storage.create_artifact(files.directory, stem, ".state") as f:
        index = write_state_file(f, keyed, operator)
    yield (
        subtask,
        StateHandle(
            file=f.name,
            size=f.size,
            checksum=f.checksum,
            index=index,
            key_group_range=r if keyed is not None else None,
        ),
    )


def _build_tables(
    kinds: Mapping[str, str], records: Iterable[tuple[str, Any, Any, Any]]
) -> dict[str, tuple[str, dict[Any, Any]]]:
    """{state name: (kind, {key: stored value})} of one subtask; refuses duplicate keys."""
    tables: dict[str, tuple[str, dict[Any, Any]]] = {n: (k, {}) for n, k in kinds.items()}
    lists: dict[tuple[str, Any], list[tuple[Any, int, Any]]] = {}
    for arrival, (name, key, extra, value) in enumerate(records):
        kind, table = tables[name]
        if kind == "list":
            lists.setdefault((name, key), []).append((extra, arrival, value))
        elif kind == "map":
            user_map = table.setdefault(key, {})
            if extra in user_map:
                raise ValueError(
                    f"map state {name!r}: user key {extra!r} of key {key!r} appears in more "
                    "than one row; keep one row per (key, user key)"
                )
            user_map[extra] = value
        elif key in table:
            raise ValueError(
                f"{kind} state {name!r}: key {key!r} appears in more than one row; a {kind} "
                "state holds one value per key (aggregate the DataFrame by key first)"
            )
        else:
            table[key] = value
    for (name, key), elements in lists.items():
        ordered = sorted(elements, key=lambda e: (e[0] is not None, e[0] or 0, e[1]))
        tables[name][1][key] = [value for _, _, value in ordered]
    for name in tables:  # None is "absent" for value state: nothing to store
        kind, table = tables[name]
        if kind != "list" and kind != "map":
            for key in [k for k, v in table.items() if v is None]:
                del table[key]
    return tables


def _load(value: Any, raw: bool) -> Any:
    if not raw:
        return value
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(
            f"raw=True expects pickled bytes in the key/value columns, got {type(value).__name__}"
        )
    return pickle.loads(value)


def _to_python(value: Any) -> Any:
    """A Spark value as the Python value state holds: structs (Rows) become tuples."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return tuple(_to_python(v) for v in value)
    if isinstance(value, list):
        return [_to_python(v) for v in value]
    if isinstance(value, dict):
        return {_to_key(k): _to_python(v) for k, v in value.items()}
    return value


def _to_key(value: Any) -> Any:
    """A Spark value as a hashable key: structs and arrays become tuples."""
    if isinstance(value, (tuple, list)):
        return tuple(_to_key(v) for v in value)
    return value

"""Incremental checkpoints of the hashmap backend: what changed, and which files a checkpoint
is made of (pure logic; the files are written and read by state/heap_incremental.py).

Design (Flink's changelog state backend, FLIP-158, with key-level change tracking): with
`state.backend.incremental` on, the heap backend's state objects add each key they write or
remove to a set per state (one set add per change). A checkpoint writes

- either a **materialization**: every key group, as a canonical state file, or
- a **changelog**: only the keys changed since the last *completed* checkpoint (upserts and
  removals, per key group),

into `<job dir>/shared/`, and its handle lists the chain the state is made of: the last
materialization, then the changelogs written since, oldest first. A checkpoint reuses the
chain of the last checkpoint the backend knows completed (never files of one that may still be
aborted), so the SharedStateRegistry counts and deletes these files like RocksDB's SST files.

Restore reads each key group from the materialization, then applies the changelogs in order
(`apply_changes`); a new materialization is written once the changelogs of the chain would make
a restore read too much (`needs_materialization`), which bounds restore time: a restore reads at
most `1 + MAX_CHANGELOG_RATIO` times the materialized state (a small one: at most
`CHANGELOG_BYTES_FLOOR` more), from at most `1 + MAX_CHANGELOG_FILES` files. Dirty tracking is
per key, not per key group: updates spread over the whole key space touch every key group
within one checkpoint interval.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_
from typing import Any

from tidegate.state.keygroups import hash_key_groups
from tidegate.state.snapshot_format import (
    CorruptStateError,
    KeyedStateSnapshot,
    KeyGroupData,
    check_owned_key_group,
    group_table,
)

#: the shared-file name prefix (in the handle) of a materialization and of a changelog
MATERIALIZED = "materialized"
CHANGELOG = "changelog"
#: materialize once the chain's changelogs hold this many bytes per byte materialized (and
#: more than CHANGELOG_BYTES_FLOOR: a small state's changelogs are cheap to read anyway) ...
MAX_CHANGELOG_RATIO = 1.0
CHANGELOG_BYTES_FLOOR = 1 << 20
#: ... or once the chain has this many changelogs
MAX_CHANGELOG_FILES = 100

#: one key group's changes: state name -> (kind, {key: new value}, [removed keys])
ChangeGroup = dict[str, tuple[str, dict[Any, Any], list[Any]]]

_ABSENT: Any = object()


@dataclass(frozen=True)
class ChainFile:
    """One file of a chain: its name in the handle (`materialized-<n>` / `changelog-<n>`),
    where it is (absolute), its size and checksum."""

    name: str
    path: str
    size: int
    checksum: str | None

    @property
    def is_changelog(self) -> bool:
        return self.name.startswith(CHANGELOG)


def chain_name(materialized: bool, checkpoint_id: int) -> str:
    return f"{MATERIALIZED if materialized else CHANGELOG}-{checkpoint_id}"


def check_chain(names: Sequence[str], where: str) -> None:
    """A chain is one materialization followed by changelogs (CorruptStateError otherwise)."""
    roles = [name.partition("-")[0] for name in names]
    if not roles or roles[0] != MATERIALIZED or any(r != CHANGELOG for r in roles[1:]):
        raise CorruptStateError(
            where,
            f"its files {list(names)} are not one {MATERIALIZED} file followed by "
            f"{CHANGELOG} files",
        )


def needs_materialization(chain: Sequence[ChainFile]) -> bool:
    """Whether the next checkpoint must rewrite every key group instead of extending `chain`
    (the base's files, materialization first): there is no base, or a restore would read too
    many changelog bytes or files."""
    if not chain:
        return True
    changelogs = [f for f in chain if f.is_changelog]
    if len(changelogs) >= MAX_CHANGELOG_FILES:
        return True
    materialized = sum(f.size for f in chain if not f.is_changelog)
    allowed = max(MAX_CHANGELOG_RATIO * materialized, CHANGELOG_BYTES_FLOOR)
    return sum(f.size for f in changelogs) > allowed


@dataclass
class ChangeLog:
    """The keys changed since the backend's last completed checkpoint (its base).

    Each checkpoint takes the keys changed since the one before (`capture`) and writes the
    union of everything captured after the base: a checkpoint that is aborted, or not yet known
    to be complete, leaves its keys in the union, since the next checkpoint extends the base's
    chain, not that checkpoint's. Thread-safe (notifications may come from another thread).
    """

    #: (checkpoint id, state name -> keys changed since the capture before), oldest first
    _captured: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def capture(self, checkpoint_id: int, change_sets: Mapping[str, Any]) -> dict[str, Any]:
        """Take the keys changed since the last capture (`change_sets`, per state; emptied) for
        checkpoint `checkpoint_id`; returns, per state, every key changed since the base (the
        union of what is captured and not confirmed; read-only).

        A change set is a set of keys (the hashmap backend), or a dict of key -> new value (the
        rocksdb backend's changelog: the union keeps each key's newest value)."""
        with self._lock:
            taken = {name: keys.copy() for name, keys in change_sets.items() if keys}
            for keys in change_sets.values():
                keys.clear()
            self._captured.append((checkpoint_id, taken))
            if len(self._captured) == 1:  # the common case: the base is the checkpoint before
                return dict(taken)
            union: dict[str, Any] = {}
            for _, changed in self._captured:
                for name, keys in changed.items():
                    union.setdefault(name, type(keys)()).update(keys)
            return union

    def notify_complete(self, checkpoint_id: int) -> None:
        """`checkpoint_id` completed and is the new base: what it wrote is in its chain."""
        with self._lock:
            if any(cid == checkpoint_id for cid, _ in self._captured):
                self._captured = [(c, k) for c, k in self._captured if c > checkpoint_id]

    def reset(self) -> None:
        """Start afresh from a restored base (the tables hold exactly its state)."""
        with self._lock:
            self._captured.clear()


@dataclass(frozen=True)
class KeyedStateChanges:
    """The synchronous-phase copy of a changelog: the changed keys' current values (a
    KeyedStateSnapshot of them, list and map containers copied) and the removed keys;
    `key_groups` groups them in the asynchronous phase, in the snapshot's place in
    `write_state_file`."""

    #: state name -> (kind, {changed key: value}), with the snapshot's key groups, TTL
    #: transformers (an entry expired when written is written as removed) and value types
    changed: KeyedStateSnapshot
    #: state name -> removed keys
    removed: Mapping[str, set[Any]]

    @property
    def max_parallelism(self) -> int:
        return self.changed.max_parallelism

    @property
    def key_group_range(self) -> range:
        return self.changed.key_group_range

    @property
    def state_kinds(self) -> dict[str, str]:
        return self.changed.state_kinds

    def key_groups(self) -> Iterator[tuple[int, ChangeGroup]]:
        """The changes grouped by key group, non-empty groups ascending."""
        snapshot, m = self.changed, self.max_parallelism
        key_groups_of = snapshot.key_groups_of or functools.partial(
            hash_key_groups, max_parallelism=m
        )
        groups: dict[int, ChangeGroup] = {}
        for name, (kind, changed) in snapshot.tables.items():
            transform = snapshot.transformers.get(name)
            upserts: dict[int, dict[Any, Any]] = {}
            removals: dict[int, list[Any]] = {}
            if transform is not None:  # an entry expired when written is written as removed
                changed = {key: transform(value) for key, value in changed.items()}
            value_type = snapshot.value_types.get(name)
            for (key, value), kg in zip(changed.items(), key_groups_of(changed), strict=True):
                if value is None:
                    removals.setdefault(kg, []).append(key)
                    continue
                table = upserts.get(kg)
                if table is None:
                    table = upserts[kg] = group_table(name, value_type)
                table[key] = value
            removed = list(self.removed.get(name, ()))
            for key, kg in zip(removed, key_groups_of(removed), strict=True):
                removals.setdefault(kg, []).append(key)
            for kg in upserts.keys() | removals.keys():
                entries = upserts.get(kg) or {}
                groups.setdefault(kg, {})[name] = (kind, entries, removals.get(kg, []))
        for kg in sorted(groups):
            data = groups[kg]
            if kg not in self.key_group_range:  # raises, naming a key of the group
                check_owned_key_group(kg, _keys_of(data), self.key_group_range, m)
            yield kg, data


def _keys_of(changes: ChangeGroup) -> KeyGroupData:
    """A change group's keys (changed or removed) in KeyGroupData's shape, for error messages."""
    return {
        name: (kind, dict.fromkeys((*upserts, *removed)))
        for name, (kind, upserts, removed) in changes.items()
    }


def capture_changes(
    tables: Mapping[str, tuple[str, Mapping[Any, Any]]],
    changed: Mapping[str, set[Any]],
    containers: Iterable[str],
) -> tuple[dict[str, tuple[str, dict[Any, Any]]], dict[str, set[Any]]]:
    """The synchronous phase of a changelog: for each state with changes, its kind and the
    current value of every changed key (a copy for list and map state, `containers`); and the
    changed keys that are no longer there (removed)."""
    values_of: dict[str, tuple[str, dict[Any, Any]]] = {}
    removed_of: dict[str, set[Any]] = {}
    copied = set(containers)
    for name, (kind, table) in tables.items():
        keys = changed.get(name)
        if not keys:
            continue
        # one lookup per key, in C loops (a key's entry is rarely in the CPU cache by now)
        values = dict(zip(keys, map(table.get, keys, repeat(_ABSENT)), strict=True))
        removed: set[Any] = set()
        if any(map(is_, values.values(), repeat(_ABSENT))):
            removed = {key for key, value in values.items() if value is _ABSENT}
            for key in removed:
                del values[key]
        if name in copied:
            values = {key: value.copy() for key, value in values.items()}
        values_of[name] = (kind, values)
        if removed:
            removed_of[name] = removed
    return values_of, removed_of


def apply_changes(data: KeyGroupData, changes: ChangeGroup, where: str) -> None:
    """Apply one changelog's changes of a key group to `data` (the key group so far)."""
    for name, change in changes.items():
        if len(change) != 3:
            raise CorruptStateError(
                where, f"state {name!r} holds entries, not changes: this is not a changelog"
            )
        kind, upserts, removed = change
        known = data.get(name)
        if known is None:
            known = data[name] = (kind, {})
        elif known[0] != kind:
            raise CorruptStateError(
                where, f"state {name!r} is {known[0]} state, but a changelog has {kind} entries"
            )
        entries = known[1]
        for key in removed:
            entries.pop(key, None)
        entries.update(upserts)
        if not entries:
            del data[name]

"""The asynchronous phase of a rocksdb snapshot: a checkpoint directory -> canonical key groups.

`RocksDBKeyedStateSnapshot` stands where the heap's `KeyedStateSnapshot` stands: the task's
asynchronous writer passes it to `snapshot_format.write_state_file`, which asks `key_groups()` for
`(key group, {state: (kind, {key: value})})` in ascending order. Every column family is scanned
once, in key order, which is key-group order; the scans are merged so that only one key group is
in memory at a time. The checkpoint directory is deleted when the snapshot is written or dropped.
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, BinaryIO

from tidegate.state import rocksdb_codec as codec
from tidegate.state.heap import StateKind
from tidegate.state.rocksdb_instance import (
    CF_PREFIX,
    RocksDBOptions,
    open_read_only,
    scan_options,
)
from tidegate.state.snapshot_format import (
    KeyGroupData,
    StateFileIndex,
    check_owned_key_group,
    transform_entries,
    write_state_file,
)


def decode_entries(
    kind: StateKind | str, items: Iterable[tuple[bytes, bytes]]
) -> Iterator[tuple[int, dict[Any, Any]]]:
    """Stored (raw key, raw value) pairs in key order -> (key group, {key: value}), ascending."""
    kind = StateKind(kind)
    current_kg = -1
    group: dict[Any, Any] = {}
    map_prefix = b""
    user_map: dict[Any, Any] = {}
    loads = codec.loads
    for raw_key, raw in items:
        kg = codec.key_group_of(raw_key)
        if kg != current_kg:
            if group:
                yield current_kg, group
            current_kg, group, map_prefix = kg, {}, b""
        if kind is StateKind.MAP:
            prefix = codec.entry_prefix(raw_key)
            key, user_key, value = loads(raw)
            if prefix != map_prefix:
                map_prefix, user_map = prefix, {}
                group[key] = user_map
            user_map[user_key] = value
        elif kind is StateKind.LIST:
            key, *elements = codec.loads_all(raw)
            group[key] = elements
        else:
            key, value = loads(raw)
            group[key] = value
    if group:
        yield current_kg, group


class RocksDBKeyedStateSnapshot:
    """A consistent copy of a rocksdb backend (a checkpoint directory), written as key groups."""

    def __init__(
        self,
        max_parallelism: int,
        key_group_range: range,
        kinds: dict[str, str],
        path: str,
        options: RocksDBOptions,
        transformers: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> None:
        self.max_parallelism = max_parallelism
        #: state name -> transform of its stored values (state TTL's cleanup in full snapshot)
        self.transformers = dict(transformers or {})
        self.key_group_range = key_group_range
        self.path = path
        self.options = options
        self._kinds = dict(kinds)
        # an aborted checkpoint drops its snapshot unwritten: its directory goes then
        self._cleanup = weakref.finalize(self, shutil.rmtree, path, True)

    @property
    def state_kinds(self) -> dict[str, str]:
        return dict(self._kinds)

    def key_groups(self) -> Iterator[tuple[int, KeyGroupData]]:
        """Non-empty key groups in ascending order, each with every state's entries."""
        db = open_read_only(self.path, self.options)
        column_families = []
        try:
            streams = []
            for name, kind in self._kinds.items():
                cf = db.get_column_family(CF_PREFIX + name)
                column_families.append(cf)
                items = cf.items(read_opt=scan_options())
                streams.append((name, kind, decode_entries(kind, items)))
            yield from self._merge(streams)
        finally:
            for cf in column_families:
                cf.close()
            db.close()
            self._cleanup()

    def _merge(
        self, streams: list[tuple[str, str, Iterator[tuple[int, dict[Any, Any]]]]]
    ) -> Iterator[tuple[int, KeyGroupData]]:
        heads: dict[str, tuple[int, dict[Any, Any]]] = {}
        for name, _, stream in streams:
            first = next(stream, None)
            if first is not None:
                heads[name] = first
        iterators = {name: (kind, stream) for name, kind, stream in streams}
        while heads:
            kg = min(head[0] for head in heads.values())
            data: KeyGroupData = {}
            for name in [n for n, head in heads.items() if head[0] == kg]:
                kind, stream = iterators[name]
                entries = heads[name][1]
                transform = self.transformers.get(name)
                if transform is not None:
                    entries = dict(transform_entries(entries, transform))
                if entries:
                    data[name] = (kind, entries)
                following = next(stream, None)
                if following is None:
                    del heads[name]
                else:
                    heads[name] = following
            if not data:  # every entry of this key group expired
                continue
            check_owned_key_group(kg, data, self.key_group_range, self.max_parallelism)
            yield kg, data

    def write(self, out: BinaryIO) -> StateFileIndex:
        """Write this snapshot as a complete state file (keyed state only)."""
        return write_state_file(out, self, None)  # type: ignore[arg-type]

    def discard(self) -> None:
        """Delete the checkpoint directory without writing it."""
        self._cleanup()

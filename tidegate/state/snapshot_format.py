"""On-disk format of one operator subtask's state in one checkpoint (a "state file").

Layout (integers little-endian)::

    header      b"TGST" | u16 format version | u16 reserved (0)
    sections    one per non-empty key group, ascending; then the operator-state section
    index       a section holding the index as JSON (so a file describes itself)
    trailer     u64 index offset | u64 index length | b"TGIX"

A section is `u32 crc | payload`; the CRC32 covers a tag naming the section (`kg:<n>`, `op`,
`index`) and the payload, so reading key group 5 at the offset of key group 6 fails like a flipped
bit does. Payloads are pickles (`common/pickling.py`): a key group is
`{state name: (kind, {key: value})}`, the operator state is `{state name: (mode, [entries])}`.

Key groups are separate sections (DESIGN §4) so that a restore at another parallelism reads only
the key groups it owns: the `StateFileIndex` (kept in the checkpoint's `_metadata`) gives each
key group's `(offset, length)`. `KeyedStateSnapshot` is what a keyed backend's synchronous
phase hands to `write_state_file`; grouping by key group happens there, in the asynchronous phase.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pickle
import struct
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from tidegate.checkpoint.errors import CheckpointIntegrityError
from tidegate.common import pickling
from tidegate.common.record_codec import batch_codec
from tidegate.state.keygroups import KeyGroupAssigner, hash_key_groups
from tidegate.state.typed_tables import TypedTable

__all__ = [
    "FORMAT_VERSION",
    "CorruptStateError",
    "KeyGroupData",
    "KeyedStateSnapshot",
    "OperatorStateData",
    "StateFileIndex",
    "describe_key_groups",
    "read_index",
    "read_key_group",
    "read_key_groups",
    "read_operator_state",
    "transform_entries",
    "write_state_file",
]

MAGIC = b"TGST"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sHH")
_CRC = struct.Struct("<I")
_TRAILER_MAGIC = b"TGIX"
_TRAILER = struct.Struct("<QQ4s")
_OPERATOR_TAG = b"op"
_INDEX_TAG = b"index"

#: one key group's keyed state: state name -> (kind, {key: value})
KeyGroupData = dict[str, tuple[str, dict[Any, Any]]]
#: a subtask's operator state: state name -> (redistribution mode, entries)
OperatorStateData = dict[str, tuple[str, list[Any]]]

_REMEDY = (
    "restore from an older checkpoint or a savepoint; if every file is affected, check the "
    "storage (partial uploads, disk errors) and the tidegate version that wrote it"
)


class CorruptStateError(CheckpointIntegrityError):
    """A state file is damaged, truncated, or not what its index says; it must not be loaded."""

    def __init__(self, where: str, problem: str, remedy: str = _REMEDY) -> None:
        super().__init__(f"corrupt state in {where}: {problem}; {remedy}")
        self.where = where
        self.problem = problem
        self.remedy = remedy


@dataclass(frozen=True)
class StateFileIndex:
    """Where each part of a state file is; small enough to keep in the checkpoint `_metadata`."""

    #: key group -> (offset, length) of its section; empty key groups are absent
    key_group_offsets: dict[int, tuple[int, int]]
    operator_offset: tuple[int, int] | None
    #: total bytes of the file
    size: int
    #: the max parallelism the key groups were computed with (None: no keyed state)
    max_parallelism: int | None = None
    #: keyed state name -> kind ('value', 'list', 'map', 'reducing', 'aggregating')
    state_kinds: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (embed it in `_metadata`; `json.dumps` it for a standalone file)."""
        return {
            "version": FORMAT_VERSION,
            "key_groups": [[kg, off, n] for kg, (off, n) in sorted(self.key_group_offsets.items())],
            "operator": list(self.operator_offset) if self.operator_offset else None,
            "size": self.size,
            "max_parallelism": self.max_parallelism,
            "state_kinds": dict(self.state_kinds),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StateFileIndex:
        """Inverse of `to_json`; raises KeyError, TypeError or ValueError on a malformed index
        (the caller names the file it came from)."""
        if data.get("version") != FORMAT_VERSION:
            raise CorruptStateError(
                "a state file index",
                f"index version {data.get('version')!r}, this tidegate reads {FORMAT_VERSION}",
                "restore with the tidegate version that wrote the checkpoint",
            )
        key_group_offsets = {}
        for kg, off, n in data["key_groups"]:
            key_group_offsets[_natural(kg)] = _section_location(off, n)
        operator = data["operator"]
        max_parallelism = data["max_parallelism"]
        return cls(
            key_group_offsets=key_group_offsets,
            operator_offset=_section_location(*operator) if operator else None,
            size=_natural(data["size"]),
            max_parallelism=None if max_parallelism is None else _natural(max_parallelism),
            state_kinds=dict(data["state_kinds"]),
        )


def _natural(value: Any) -> int:
    """`value` if it is an int >= 0 (not a bool), else ValueError."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a non-negative integer")
    return value


def _section_location(offset: Any, length: Any) -> tuple[int, int]:
    if _natural(length) < _CRC.size:
        raise ValueError(f"a section of {length} bytes cannot hold its checksum")
    return _natural(offset), length


@dataclass(frozen=True)
class KeyedStateSnapshot:
    """The synchronous-phase copy of a keyed state backend; `write` is the asynchronous phase.

    It owns its tables (the values are shared by reference with the live state, which must not
    change them in place), so it can be written from another thread while the subtask keeps
    processing records.
    """

    max_parallelism: int
    key_group_range: range
    #: state name -> (kind, {key: value})
    tables: dict[str, tuple[str, dict[Any, Any]]]
    #: keys -> their key groups, in order, memoised across snapshots by the backend (None:
    #: hash every key)
    key_groups_of: Callable[[Collection[Any]], list[int]] | None = field(
        default=None, compare=False, repr=False
    )
    #: state name -> transform of its stored values, applied here in the asynchronous phase
    #: (state TTL's cleanup in full snapshot; see `transform_entries`)
    transformers: Mapping[str, Callable[[Any], Any]] = field(
        default_factory=dict, compare=False, repr=False
    )
    #: state name -> declared type of its values: written as a typed column (TypedTable)
    value_types: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def state_kinds(self) -> dict[str, str]:
        return {name: kind for name, (kind, _) in self.tables.items()}

    def key_groups(self) -> Iterator[tuple[int, KeyGroupData]]:
        """The entries grouped by key group, non-empty groups in ascending order.

        Raises RuntimeError if a key is outside this subtask's key groups: the record was
        routed to the wrong subtask, and writing it would lose it on restore.
        """
        m = self.max_parallelism
        key_groups_of = self.key_groups_of or _key_groups_function(
            m, [table for _, table in self.tables.values()]
        )
        groups: list[KeyGroupData] = [{} for _ in range(m)]
        for name, (kind, table) in self.tables.items():
            type_info = self.value_types.get(name)
            by_group = [group_table(name, type_info) for _ in range(m)]
            transform = self.transformers.get(name)
            if transform is not None:
                table = dict(transform_entries(table, transform))
            for (key, value), kg in zip(table.items(), key_groups_of(table), strict=True):
                by_group[kg][key] = value
            for kg, entries in enumerate(by_group):
                if entries:
                    groups[kg][name] = (kind, entries)
        for kg, data in enumerate(groups):
            if not data:
                continue
            check_owned_key_group(kg, data, self.key_group_range, m)
            yield kg, data

    def write(self, out: BinaryIO) -> StateFileIndex:
        """Write this snapshot as a complete state file (keyed state only)."""
        return write_state_file(out, self, None)


def group_table(name: str, type_info: Any) -> dict[Any, Any]:
    """An empty `{key: value}` of state `name` in one key group: a TypedTable (one encoded
    column) if the state declares a type with a batch codec, else a plain dict."""
    if type_info is not None and batch_codec(type_info) is not None:
        return TypedTable(name, type_info)
    return {}


def check_owned_key_group(
    kg: int, data: KeyGroupData, key_group_range: range, max_parallelism: int
) -> None:
    """Refuse to write key group `kg` of a snapshot if this subtask does not own it (a key
    routed to the wrong subtask): the checkpoint would restore it nowhere."""
    if kg not in key_group_range:
        name, (_, entries) = next(iter(data.items()))
        raise RuntimeError(
            f"key {next(iter(entries))!r} of state {name!r} is in key group {kg}, "
            f"outside this subtask's key groups {describe_key_groups(key_group_range)}"
            f" (max parallelism {max_parallelism}): it was routed to the wrong subtask"
        )


def transform_entries(
    table: Mapping[Any, Any], transform: Callable[[Any], Any]
) -> Iterator[tuple[Any, Any]]:
    """`table`'s (key, transform(value)) pairs, without the keys whose transform is None.

    A snapshot transformer (e.g. state TTL's) sees each stored value of a state while the
    snapshot is written and returns what to write instead, or None to leave the key out.
    """
    for key, value in table.items():
        new = transform(value)
        if new is not None:
            yield key, new


def _key_groups_function(
    max_parallelism: int, tables: list[dict[Any, Any]]
) -> Callable[[Collection[Any]], list[int]]:
    """keys -> their key groups, for visiting every key of `tables` once each.

    The tables of one operator mostly share keys, so with several a memo (the assigner's) saves
    hashing a key again; with one it only costs (about 20% more than hashing directly).
    """
    if len(tables) > 1:
        memo_size = sum(map(len, tables)) + 1
        return KeyGroupAssigner(max_parallelism, cache_limit=memo_size).key_groups
    return functools.partial(hash_key_groups, max_parallelism=max_parallelism)


def describe_key_groups(key_groups: range) -> str:
    """`range(0, 64)` as `[0, 63]`, the inclusive form DESIGN §6 and Flink's logs use."""
    return f"[{key_groups.start}, {key_groups.stop - 1}]"


class _SectionWriter:
    """Writes framed sections and counts bytes (offsets do not depend on `out.tell()`)."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.position = 0

    def raw(self, data: bytes) -> None:
        self._out.write(data)
        self.position += len(data)

    def section(self, tag: bytes, payload: bytes) -> tuple[int, int]:
        offset = self.position
        self.raw(_CRC.pack(zlib.crc32(payload, zlib.crc32(tag))))
        self.raw(payload)
        return offset, self.position - offset


def write_state_file(
    out: BinaryIO, keyed: KeyedStateSnapshot | None, operator: OperatorStateData | None
) -> StateFileIndex:
    """Write a complete state file to `out`, which must be positioned at the start of a new file.

    This is the asynchronous phase of a subtask snapshot: it runs off the subtask loop, reading
    only the copies the synchronous phase made. The caller makes the file durable (flush, close,
    fsync where it applies) before acknowledging the checkpoint with the returned index.
    """
    writer = _SectionWriter(out)
    # Step 1: header
    writer.raw(_HEADER.pack(MAGIC, FORMAT_VERSION, 0))
    # Step 2: one section per non-empty key group, ascending
    key_group_offsets: dict[int, tuple[int, int]] = {}
    for kg, data in keyed.key_groups() if keyed is not None else ():
        key_group_offsets[kg] = writer.section(_key_group_tag(kg), pickling.dumps(data))
    # Step 3: operator state
    operator_offset = None
    if operator is not None:
        operator_offset = writer.section(_OPERATOR_TAG, pickling.dumps(operator))
    # Step 4: the index (without its own size) and the trailer that locates it
    index = StateFileIndex(
        key_group_offsets=key_group_offsets,
        operator_offset=operator_offset,
        size=0,
        max_parallelism=keyed.max_parallelism if keyed is not None else None,
        state_kinds=dict(keyed.state_kinds) if keyed is not None else {},
    )
    index_offset, index_length = writer.section(_INDEX_TAG, json.dumps(index.to_json()).encode())
    writer.raw(_TRAILER.pack(index_offset, index_length, _TRAILER_MAGIC))
    return dataclasses.replace(index, size=writer.position)


def read_key_group(f: BinaryIO, index: StateFileIndex, kg: int) -> KeyGroupData:
    """Key group `kg` of the state file `f` (seekable); empty if the file has no entries for it."""
    return _read_key_group(f, _check_header(f), index, kg)


def read_key_groups(
    f: BinaryIO, index: StateFileIndex, key_groups: range
) -> Iterator[tuple[int, KeyGroupData]]:
    """The non-empty key groups of `f` that fall in `key_groups`, ascending.

    This is what a restore reads from each old state file that overlaps its key-group range;
    feed it to `HeapKeyedStateBackend.restore`.
    """
    wanted = sorted(kg for kg in index.key_group_offsets if kg in key_groups)
    if not wanted:
        return
    size = _check_header(f)
    for kg in wanted:
        yield kg, _read_key_group(f, size, index, kg)


def read_operator_state(f: BinaryIO, index: StateFileIndex) -> OperatorStateData:
    """The operator state of `f` (empty if the file holds none)."""
    if index.operator_offset is None:
        return {}
    size = _check_header(f)
    offset, length = index.operator_offset
    payload = _read_section(f, size, _OPERATOR_TAG, offset, length)
    data = _loads(payload, f, "operator state")
    if type(data) is not dict or not all(
        type(v) is tuple and len(v) == 2 and type(v[1]) is list for v in data.values()
    ):
        raise CorruptStateError(_describe(f), "its operator state is not {name: (mode, entries)}")
    return data


def read_index(f: BinaryIO) -> StateFileIndex:
    """Recover a state file's index from the file itself (for tools and relocated savepoints)."""
    size = _check_header(f)
    if size < _HEADER.size + _TRAILER.size:
        raise CorruptStateError(_describe(f), f"file of {size} bytes has no trailer (truncated)")
    f.seek(size - _TRAILER.size)
    offset, length, magic = _TRAILER.unpack(f.read(_TRAILER.size))
    if magic != _TRAILER_MAGIC:
        raise CorruptStateError(_describe(f), "trailer magic missing (truncated or overwritten)")
    payload = _read_section(f, size, _INDEX_TAG, offset, length)
    try:
        data = json.loads(bytes(payload))
        data["size"] = size
        return StateFileIndex.from_json(data)
    except (ValueError, KeyError, TypeError, RecursionError, CorruptStateError) as e:
        # the section's checksum matched: it was written so (by another tool or version)
        problem = e.problem if isinstance(e, CorruptStateError) else f"{type(e).__name__}: {e}"
        raise CorruptStateError(_describe(f), f"its index is malformed ({problem})") from e


def _key_group_tag(kg: int) -> bytes:
    return b"kg:%d" % kg


def _read_key_group(f: BinaryIO, size: int, index: StateFileIndex, kg: int) -> KeyGroupData:
    location = index.key_group_offsets.get(kg)
    if location is None:
        return {}
    payload = _read_section(f, size, _key_group_tag(kg), *location)
    data = _loads(payload, f, f"key group {kg}")
    # {state: (kind, entries)}, or (kind, upserts, removed) in a changelog (heap_changelog)
    if type(data) is not dict or not all(
        type(v) is tuple and len(v) in (2, 3) and type(v[0]) is str for v in data.values()
    ):
        raise CorruptStateError(_describe(f), f"key group {kg} is not {{state: (kind, entries)}}")
    return data


def _check_header(f: BinaryIO) -> int:
    """Check the header of `f`; returns the file's size."""
    f.seek(0)
    header = f.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise CorruptStateError(_describe(f), f"file of {len(header)} bytes has no header")
    magic, version, _reserved = _HEADER.unpack(header)
    if magic != MAGIC:
        raise CorruptStateError(_describe(f), f"not a tidegate state file (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise CorruptStateError(
            _describe(f),
            f"format version {version}, this tidegate reads version {FORMAT_VERSION}",
            "restore with the tidegate version that wrote the checkpoint",
        )
    return f.seek(0, 2)


def _read_section(f: BinaryIO, size: int, tag: bytes, offset: int, length: int) -> memoryview:
    """Read and CRC-check the section at (offset, length) of `f` (of `size` bytes); return its
    payload. A location outside the file is refused before anything is read (a damaged length
    must not allocate gigabytes)."""
    what = tag.decode()
    if length < _CRC.size:
        raise CorruptStateError(_describe(f), f"section {what} has impossible length {length}")
    if offset + length > size:
        raise CorruptStateError(
            _describe(f),
            f"section {what} at offset {offset} needs {length} bytes but the file ends after "
            f"{max(size - offset, 0)} (truncated, or its index is damaged)",
        )
    f.seek(offset)
    data = f.read(length)
    if len(data) != length:
        raise CorruptStateError(
            _describe(f),
            f"section {what} at offset {offset} needs {length} bytes but the file ends after "
            f"{len(data)} (truncated)",
        )
    (expected,) = _CRC.unpack_from(data)
    payload = memoryview(data)[_CRC.size :]
    if zlib.crc32(payload, zlib.crc32(tag)) != expected:
        raise CorruptStateError(
            _describe(f), f"checksum mismatch in section {what} at offset {offset}"
        )
    return payload


def _loads(payload: memoryview, f: BinaryIO, what: str) -> Any:
    try:
        return pickle.loads(payload)
    except Exception as e:  # the bytes are intact (CRC passed): usually a class that moved
        raise CorruptStateError(
            _describe(f),
            f"{what} cannot be unpickled ({type(e).__name__}: {e})",
            "if it names a module or class of the job, the job's code changed since the "
            "checkpoint was taken: restore with the code that wrote it (or a compatible one), "
            "else restore from an older checkpoint or a savepoint",
        ) from e


def _describe(f: BinaryIO) -> str:
    name = getattr(f, "name", None)
    return f"state file {name}" if isinstance(name, str) else f"state file {f!r}"

"""Fuzzing every reader of checkpoint artifacts with damaged files (hypothesis).

Seeds are real files written by the real writers: a full checkpoint of the hashmap backend (keyed
and operator state, channel state of an unaligned checkpoint: `runtime/snapshot_writer.
write_snapshot`), a savepoint of the rocksdb backend (canonical state files), an incremental
hashmap checkpoint (a changelog chain, `_metadata` version 4) and an incremental
RocksDB checkpoint (version 3). Each is damaged at the byte level (truncated, bits flipped, bytes
overwritten, inserted or deleted, sections swapped, a wrong format version, replaced by random
bytes) or, for `_metadata`, in its structure with a valid checksum (a value replaced, a key
dropped, a wrong version) and read back by the reader a restore or a tool uses.

The property, for every damaged input: the reader raises a CheckpointIntegrityError (the
documented family: CorruptCheckpointError, UnsupportedFormatVersionError, CorruptStateError,
ChecksumMismatchError, MissingCheckpointFileError) whose message names the file, or it returns
exactly what the undamaged file gives (damage that changes nothing read, e.g. `_metadata`
re-indented). Never another exception (IndexError, struct.error, UnicodeDecodeError, a pickle
error, MemoryError from a huge length), never different data, never a hang (each reader is
bounded by the file's size). docs/checkpoint-format.md#damaged-files says what is covered.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.tasks import task_environment
from tests.unit.test_incremental_snapshots import SEEN, TAGS, Job, change_heap, fill
from tidegate.checkpoint.errors import CheckpointIntegrityError
from tidegate.checkpoint.metadata import (
    METADATA_FILE_NAME,
    ChannelStateMetadata,
    CheckpointMetadata,
    OperatorMetadata,
    canonical_json,
    decode_metadata,
)
from tidegate.checkpoint.selection import RestoreCandidate, choose_checkpoint
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.runtime.operators import OperatorSnapshot
from tidegate.runtime.restore import CHANNEL_STATE_KEY
from tidegate.runtime.snapshot_writer import write_snapshot
from tidegate.state.channel_state import read_channel_state
from tidegate.state.checksums import checksum_of
from tidegate.state.handles import HEAP_CHANGELOG, StateHandle
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.heap_incremental import read_changelog_key_groups
from tidegate.state.incremental_handles import resolve
from tidegate.state.rocksdb_incremental import IncrementalKeyedStateHandle
from tidegate.state.snapshot_format import read_index, read_key_groups, read_operator_state

M = 128
FUZZ = settings(max_examples=75, suppress_health_check=[HealthCheck.function_scoped_fixture])
#: for the examples that read a whole checkpoint
FUZZ_FEWER = settings(FUZZ, max_examples=25)


# ------------------------------------------------------------------------------------- seeds


@dataclass(frozen=True)
class Seed:
    """A completed checkpoint or savepoint written by the real writers."""

    directory: str
    metadata: CheckpointMetadata

    def files(self) -> list[str]:
        """Every file of it: `_metadata` and each artifact its metadata names."""
        root = self.directory
        names = [METADATA_FILE_NAME]
        for _, _, h in self.metadata.state_handles():
            names.append(h.file)
            if h.incremental is not None:
                names += [f.file for f in h.incremental.files]
        for entry in self.metadata.channel_state.values():
            names += [h.file for h in entry.subtasks.values()]
        return sorted({os.path.normpath(os.path.join(root, n)) for n in names})


def _filled(backend: Any) -> Any:
    """`backend` (hashmap or rocksdb) with value, map and list state of 300 keys."""
    fill(backend, range(300))
    tags, seen = backend.get_map_state(TAGS), backend.get_list_state(SEEN)
    for k in range(0, 300, 3):
        backend.current_key = k
        tags.put(f"t{k}", {"nested": [k, str(k)]})
        seen.add(k * 1.5)
    return backend


def _full_snapshot(storage: CheckpointStorage, cid: int, target: str | None, backend: Any) -> Seed:
    """What a task writes for checkpoint `cid` (savepoint into `target`): the keyed and
    operator state of one operator, and (checkpoints only) the channel state of an unaligned
    checkpoint; the `_metadata` the JobMaster then writes."""
    operator = {
        "__splits__": ("split", [("file-a", 120), ("file-b", 0)]),
        "offsets": ("union", [{"partition": 0, "offset": 42}]),
        "rules": ("broadcast", [("r1", "x > 3"), ("r2", None)]),
    }
    snap = OperatorSnapshot(backend.snapshot(), operator)
    frames = (
        None
        if target
        else [pickle.dumps((c, [f"in-flight-{c}-{n}" for n in range(5)])) for c in (0, 1)]
    )
    directory = target or storage.create_checkpoint_dir(cid)
    if target:
        storage.create_dir(target)
    handles, _ = write_snapshot(
        task_environment(storage),
        0,
        cid,
        [("count", snap)],
        {"count": range(M)},
        frames,
        target,
        "count",
    )
    channel_state = {}
    if frames:
        channel_state["count"] = ChannelStateMetadata(
            1, ((0, 0), (0, 1)), {0: handles[CHANNEL_STATE_KEY]}
        )
    metadata = CheckpointMetadata(
        job_id="job",
        checkpoint_id=cid,
        timestamp_ms=1000,
        generation=1,
        max_parallelism=M,
        is_savepoint=target is not None,
        operators={"count": OperatorMetadata("Process", 1, {0: handles["count"]})},
        channel_state=channel_state,
    )
    storage.write_metadata(directory, metadata)
    return Seed(directory, metadata)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, Seed]:
    tmp = tmp_path_factory.mktemp("seeds")
    storage = CheckpointStorage(str(tmp / "full"), "job", generation=1)
    heap, rocks = Job(tmp / "heap"), Job(tmp / "rocksdb")
    try:
        # a checkpoint of the hashmap backend; a savepoint (full) of the rocksdb backend
        full = _full_snapshot(storage, 1, None, _filled(HeapKeyedStateBackend(M, range(M))))
        savepoint_dir = str(tmp / "savepoints" / "savepoint-job-1")
        savepoint = _full_snapshot(storage, 2, savepoint_dir, _filled(rocks.backend()))
        backend = heap.backend(heap=True)
        change_heap(backend, range(400), "a")
        heap.snapshot(1, [backend])
        change_heap(backend, range(0, 400, 7), "b")
        incremental_heap = Seed(heap.storage.checkpoint_dir(2), heap.snapshot(2, [backend]))
        rocksdb = rocks.backend()
        fill(rocksdb, range(300))
        incremental_rocksdb = Seed(rocks.storage.checkpoint_dir(1), rocks.snapshot(1, [rocksdb]))
    finally:
        rocks.close()
    found = {
        "full": full,
        "savepoint": savepoint,
        "hashmap incremental": incremental_heap,
        "rocksdb incremental": incremental_rocksdb,
    }
    versions = {
        name: json.loads(Path(s.directory, METADATA_FILE_NAME).read_bytes())["version"]
        for name, s in found.items()
    }
    assert versions == {
        "full": 2,
        "savepoint": 2,
        "hashmap incremental": 4,
        "rocksdb incremental": 3,
    }
    return found


# -------------------------------------------------------------------------------- damage


@st.composite
def damage(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` damaged in one of the ways storage damages files (or a writer misbehaves)."""
    n = len(data)
    if n == 0:
        return draw(st.binary(min_size=1, max_size=64))
    at = draw(st.integers(0, n - 1))
    kind = draw(
        st.sampled_from(
            [
                "truncate",
                "flip",
                "overwrite",
                "insert",
                "delete",
                "swap",
                "version",
                "random",
                "empty",
            ]
        )
    )
    match kind:
        case "truncate":
            return data[:at]
        case "flip":
            flips = draw(
                st.lists(
                    st.tuples(st.integers(0, n - 1), st.integers(0, 7)), min_size=1, max_size=4
                )
            )
            out = bytearray(data)
            for i, bit in flips:
                out[i] ^= 1 << bit
            return bytes(out)
        case "overwrite":
            junk = draw(st.binary(min_size=1, max_size=16))
            return data[:at] + junk + data[at + len(junk) :]
        case "insert":
            return data[:at] + draw(st.binary(min_size=1, max_size=16)) + data[at:]
        case "delete":
            return data[:at] + data[at + draw(st.integers(1, 16)) :]
        case "swap":  # two sections of the file change places
            cut = sorted(draw(st.lists(st.integers(0, n), min_size=3, max_size=3)))
            a, b, c = cut
            return data[:a] + data[b:c] + data[a:b] + data[c:]
        case "version":  # the u16 format version after a binary file's 4-byte magic
            version = draw(st.sampled_from([0, 2, 3, 255, 65535]))
            return data[:4] + version.to_bytes(2, "little") + data[6:]
        case "random":
            return draw(st.binary(max_size=256))
        case _:
            return b""


def damaged_file(paths: list[str]) -> st.SearchStrategy[tuple[str, bytes]]:
    """One of `paths` and its content, damaged."""
    return st.sampled_from(paths).flatmap(
        lambda p: st.tuples(st.just(p), damage(Path(p).read_bytes()))
    )


def outcome(read: Callable[[], Any], path: str) -> Any:
    """What `read` returns, or the CheckpointIntegrityError it raises (checked to name the
    file); any other exception fails the test."""
    try:
        return read()
    except CheckpointIntegrityError as error:
        assert os.path.basename(path) in str(error), f"the error does not name {path}: {error}"
        return error


def assert_refused_or_unchanged(result: Any, original: Any) -> None:
    if not isinstance(result, CheckpointIntegrityError):
        assert result == original, "damaged input read as different data (a wrong restore)"


class Damaged:
    """Writes damaged bytes over one file of a seed for one example, and puts the original
    back afterwards."""

    def __init__(self, path: str, data: bytes) -> None:
        self.path, self.data = path, data
        self.original = Path(path).read_bytes()

    def __enter__(self) -> Damaged:
        Path(self.path).write_bytes(self.data)
        return self

    def __exit__(self, *exc: object) -> None:
        Path(self.path).write_bytes(self.original)


# ------------------------------------------------------------------------------- readers


def read_state_file(path: str, handle: StateHandle) -> tuple:
    """Everything a restore or tool reads from a canonical state file: the index recovered
    from the file itself, then the key groups and operator state through `_metadata`'s index."""
    with open(path, "rb") as f:
        index = read_index(f)
        keyed = list(read_key_groups(f, handle.index, range(M)))
        operator = read_operator_state(f, handle.index)
        again = list(read_key_groups(f, index, range(M)))  # through the file's own index
    return index.key_group_offsets, keyed, operator, again


def read_channels(path: str) -> list:
    with open(path, "rb") as f:
        return read_channel_state(f, path)


def read_chain(seed: Seed) -> list:
    """The canonical key groups a restore reads from a hashmap changelog chain."""
    handle = seed.metadata.operators["op"].subtasks[0].incremental
    assert handle is not None and handle.backend == HEAP_CHANGELOG
    h = IncrementalKeyedStateHandle(seed.directory, seed.metadata.checkpoint_id, handle, range(M))
    return list(read_changelog_key_groups(h))


def metadata_path(seed: Seed) -> str:
    return os.path.join(seed.directory, METADATA_FILE_NAME)


# --------------------------------------------------------------------------------- tests


SEED_NAMES = ["full", "savepoint", "hashmap incremental", "rocksdb incremental"]


@pytest.mark.parametrize("name", SEED_NAMES)
def test_damaged_metadata_of_every_version_is_refused_naming_the_file(seeds, name) -> None:
    seed = seeds[name]
    path = metadata_path(seed)
    data = Path(path).read_bytes()
    assert decode_metadata(data, path) == seed.metadata

    @FUZZ
    @given(damage(data))
    def check(damaged: bytes) -> None:
        assert_refused_or_unchanged(
            outcome(lambda: decode_metadata(damaged, path), path), seed.metadata
        )

    check()


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
        st.sampled_from([-1, 0, 1, 10**30, "../x", "2", [], {}]),
    )
    return st.recursive(
        scalars,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
        max_leaves=6,
    )


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """The paths to every value of a JSON document."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


@st.composite
def edited_documents(draw: st.DrawFn, document: dict) -> bytes:
    """`document` with values replaced or keys removed, and a valid checksum: what a buggy
    writer or a hand edit produces (the checksum cannot catch it)."""
    document = json.loads(json.dumps(document))
    document.pop("checksum")
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(_json_values())
    document["checksum"] = checksum_of(canonical_json(document))
    return json.dumps(document).encode()


@pytest.mark.parametrize("name", ["full", "hashmap incremental", "rocksdb incremental"])
def test_metadata_with_a_valid_checksum_but_malformed_content_is_refused(seeds, name) -> None:
    """A decoded `_metadata` is usable: every state file it names reads as its index says, or
    the error names what is wrong."""
    seed = seeds[name]
    path = metadata_path(seed)
    document = json.loads(Path(path).read_bytes())

    @FUZZ_FEWER
    @given(edited_documents(document))
    def check(edited: bytes) -> None:
        decoded = outcome(lambda: decode_metadata(edited, path), path)
        if isinstance(decoded, CheckpointIntegrityError):
            return
        for uid, subtask, handle in decoded.state_handles():
            assert 0 <= subtask < decoded.operators[uid].parallelism
            if handle.index is None or handle.incremental is not None:
                continue
            file = os.path.join(seed.directory, handle.file)
            if os.path.isfile(file):
                outcome(lambda file=file, handle=handle: read_state_file(file, handle), file)

    check()


@pytest.mark.parametrize("name", ["full", "savepoint"])
def test_a_damaged_state_file_is_refused_or_reads_as_written(seeds, name) -> None:
    seed = seeds[name]
    (handle,) = seed.metadata.operators["count"].subtasks.values()
    path = os.path.join(seed.directory, handle.file)
    data = Path(path).read_bytes()
    original = read_state_file(path, handle)
    assert len(original[1]) > 100 and original[2]

    @FUZZ
    @given(damage(data))
    def check(damaged: bytes) -> None:
        with Damaged(path, damaged):
            assert_refused_or_unchanged(
                outcome(lambda: read_state_file(path, handle), path), original
            )

    check()


def test_damaged_channel_state_is_refused_or_reads_as_written(seeds) -> None:
    seed = seeds["full"]
    (handle,) = seed.metadata.channel_state["count"].subtasks.values()
    path = os.path.join(seed.directory, handle.file)
    data = Path(path).read_bytes()
    original = read_channels(path)
    assert [channel for channel, _ in original] == [0, 1]

    @FUZZ
    @given(damage(data))
    def check(damaged: bytes) -> None:
        with Damaged(path, damaged):
            assert_refused_or_unchanged(outcome(lambda: read_channels(path), path), original)

    check()


def test_a_damaged_file_of_a_hashmap_changelog_chain_is_refused_or_reads_as_written(seeds) -> None:
    seed = seeds["hashmap incremental"]
    handle = seed.metadata.operators["op"].subtasks[0].incremental
    chain = [resolve(seed.directory, f.file) for f in handle.shared]
    assert [f.name for f in handle.shared] == ["materialized-1", "changelog-2"]
    original = read_chain(seed)

    @FUZZ
    @given(damaged_file(chain))
    def check(target: tuple[str, bytes]) -> None:
        path, damaged = target
        with Damaged(path, damaged):
            assert_refused_or_unchanged(outcome(lambda: read_chain(seed), path), original)

    check()


def test_swapped_files_of_a_hashmap_changelog_chain_are_refused(seeds) -> None:
    """A materialization where a changelog belongs (or the reverse), with the sizes and
    checksums `_metadata` records for the swapped files: the chain's reader refuses it."""
    seed = seeds["hashmap incremental"]
    handle = seed.metadata.operators["op"].subtasks[0].incremental
    first, second = (resolve(seed.directory, f.file) for f in handle.shared)
    materialized, changelog = Path(first).read_bytes(), Path(second).read_bytes()
    with (
        Damaged(first, changelog),
        Damaged(second, materialized),
        pytest.raises(CheckpointIntegrityError, match=r"not a (changelog|materialization)"),
    ):
        read_chain(seed)


@pytest.mark.parametrize("name", SEED_NAMES)
def test_a_restore_refuses_a_checkpoint_with_any_damaged_file(seeds, name) -> None:
    """What the JobMaster does before any slot starts (`choose_checkpoint`: decode `_metadata`,
    verify every file's size and checksum) refuses every damaged file of every kind, the
    RocksDB files of an incremental checkpoint included."""
    seed = seeds[name]
    files = seed.files()
    assert len(files) >= 2

    @FUZZ_FEWER
    @given(damaged_file(files))
    def check(target: tuple[str, bytes]) -> None:
        path, damaged = target
        with Damaged(path, damaged):
            result = outcome(
                lambda: choose_checkpoint(
                    [RestoreCandidate(seed.directory)], uids=None, allow_fallback=False
                )[0],
                path,
            )
        if damaged != Path(path).read_bytes() and not path.endswith(METADATA_FILE_NAME):
            assert isinstance(result, CheckpointIntegrityError), f"damaged {path} was not noticed"
        assert_refused_or_unchanged(result, seed.metadata)

    check()


def test_a_missing_file_is_named(seeds, tmp_path) -> None:
    seed = seeds["full"]
    for path in seed.files():
        if path.endswith(METADATA_FILE_NAME):
            continue
        moved = shutil.move(path, tmp_path / "moved")
        try:
            with pytest.raises(CheckpointIntegrityError, match=os.path.basename(path)):
                choose_checkpoint(
                    [RestoreCandidate(seed.directory)], uids=None, allow_fallback=False
                )
        finally:
            shutil.move(moved, path)

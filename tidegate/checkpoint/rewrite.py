"""Rewrite a savepoint to another max parallelism (a changeable key-space size).

The max parallelism of a job is the number of key groups its keyed state is split into; a
restore cannot change it, because every key's key group is `stable_hash(key) % max_parallelism`
(DESIGN §6). This offline tool can: it reads every key of every keyed state file of a snapshot,
computes the key's key group under the new max parallelism, and writes a new, self-contained
savepoint whose state files hold the new key groups. A job then restores from it with the new
max parallelism configured (or none).

`rewrite_max_parallelism(src, dst, max_parallelism, parallelism=None)`:

1. read and validate the source `_metadata` (any savepoint, or a full checkpoint);
2. refuse what cannot be rewritten: in-flight data (unaligned), handles that are not canonical
   state files (incremental RocksDB checkpoints), a non-empty destination;
3. verify every source file against its recorded size and checksum;
4. per operator with keyed state and per new subtask, scan the old files' key groups and keep
   the keys whose new key group the subtask owns (one pass per new subtask, so memory holds one
   subtask's share); operator state moves with it (unchanged at the same parallelism);
5. copy the files of operators without keyed state unchanged;
6. write the new `_metadata` atomically, last (the savepoint is complete exactly when it exists).

The source is only read, never changed.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.checkpoint.assignment import redistribute_operator_state
from tidegate.checkpoint.errors import CheckpointError
from tidegate.checkpoint.metadata import CheckpointMetadata, OperatorMetadata, RewrittenFrom
from tidegate.checkpoint.storage import (
    CheckpointStorage,
    read_checkpoint_metadata,
    resolve_checkpoint_path,
)
from tidegate.checkpoint.verification import verify_checkpoint
from tidegate.common.filesystems import FileSystems
from tidegate.state.handles import StateHandle, file_safe
from tidegate.state.keygroups import UPPER_BOUND_MAX_PARALLELISM, key_group_range, stable_hash
from tidegate.state.operator_state import RedistributionMode
from tidegate.state.snapshot_format import (
    KeyedStateSnapshot,
    OperatorStateData,
    read_key_groups,
    read_operator_state,
    write_state_file,
)

__all__ = ["RewriteError", "RewriteResult", "rewrite_max_parallelism"]

#: handle types that are canonical state files (a handle without "type" is one too)
_CANONICAL_TYPES = frozenset({"full", "canonical"})


class RewriteError(CheckpointError):
    """The snapshot cannot be rewritten (or the arguments are wrong); nothing was written."""


@dataclass(frozen=True)
class RewriteResult:
    """What `rewrite_max_parallelism` wrote."""

    path: str
    old_max_parallelism: int
    max_parallelism: int
    #: uid -> the number of subtasks its keyed state was written for
    keyed_operators: dict[str, int]
    #: uids whose files were copied unchanged (no keyed state)
    copied_operators: tuple[str, ...]
    keys: int


def rewrite_max_parallelism(
    src: str,
    dst: str,
    max_parallelism: int,
    parallelism: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RewriteResult:
    """Write a copy of the snapshot `src` with its keyed state re-hashed to `max_parallelism`
    key groups into the new savepoint directory `dst`.

    `src` is a savepoint or checkpoint directory, its `_metadata`, or a job directory (its
    latest checkpoint). `parallelism` is the number of subtasks the keyed state is split over in
    the new savepoint (default: each operator's old parallelism, capped at `max_parallelism`);
    any restore parallelism up to `max_parallelism` works either way. Raises RewriteError (or a
    CheckpointError for a damaged source) without writing anything when the rewrite is refused.
    """
    # Step 1: arguments and source metadata
    _check_arguments(max_parallelism, parallelism)
    filesystems = FileSystems.for_urls(storage_options, src, dst)
    directory = resolve_checkpoint_path(src, filesystems)
    metadata = read_checkpoint_metadata(directory, filesystems)
    # Step 2: what cannot be rewritten
    _check_rewritable(metadata, directory)
    storage = CheckpointStorage(dst, "rewrite", filesystems)
    dst = _empty_destination(storage, dst)
    # Step 3: the source's files are intact
    verify_checkpoint(metadata, directory, filesystems=filesystems).raise_for_problems()
    try:
        return _rewrite(storage, metadata, directory, dst, max_parallelism, parallelism)
    except BaseException:
        # nothing was there before: leave no half-written savepoint behind
        with contextlib.suppress(FileNotFoundError):
            storage.fs.rm(storage.fs._strip_protocol(dst), recursive=True)
        raise


def _rewrite(
    storage: CheckpointStorage,
    metadata: CheckpointMetadata,
    directory: str,
    dst: str,
    max_parallelism: int,
    parallelism: int | None,
) -> RewriteResult:
    """Steps 4 to 6 of `rewrite_max_parallelism`."""
    # Steps 4 and 5: state files
    operators: dict[str, OperatorMetadata] = {}
    keyed: dict[str, int] = {}
    copied: list[str] = []
    keys = 0
    for uid, entry in sorted(metadata.operators.items()):
        handles = entry.handles()
        if any(h.key_group_range is not None for h in handles):
            p = min(parallelism or entry.parallelism, max_parallelism)
            subtasks, written = _rewrite_keyed(
                storage, directory, dst, uid, handles, max_parallelism, p
            )
            operators[uid] = OperatorMetadata(entry.name, p, subtasks)
            keyed[uid], keys = p, keys + written
        else:
            for h in handles:
                _copy_file(storage, f"{directory}/{h.file}", f"{dst}/{h.file}")
            operators[uid] = entry
            copied.append(uid)
    # Step 6: the new _metadata, last and atomically
    storage.write_metadata(dst, _new_metadata(metadata, directory, operators, max_parallelism))
    return RewriteResult(dst, metadata.max_parallelism, max_parallelism, keyed, tuple(copied), keys)


# checks -----------------------------------------------------------------------------------------
def _check_arguments(max_parallelism: int, parallelism: int | None) -> None:
    if type(max_parallelism) is not int or not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise RewriteError(
            f"the new max parallelism must be an integer in [1, {UPPER_BOUND_MAX_PARALLELISM}], "
            f"got {max_parallelism!r}"
        )
    if parallelism is not None and (type(parallelism) is not int or parallelism < 1):
        raise RewriteError(f"the parallelism must be a positive integer, got {parallelism!r}")
    if parallelism is not None and parallelism > max_parallelism:
        raise RewriteError(
            f"parallelism {parallelism} is above the new max parallelism {max_parallelism}: "
            "each subtask needs at least one key group. Use a parallelism of at most "
            f"{max_parallelism}, or a larger max parallelism"
        )


def _check_rewritable(metadata: CheckpointMetadata, directory: str) -> None:
    if any(entry.subtasks for entry in metadata.channel_state.values()):
        raise RewriteError(
            f"{directory} is an unaligned checkpoint holding in-flight records, which belong to "
            "the old topology and cannot be rewritten. Take a savepoint (always aligned) of the "
            "job, or use an aligned checkpoint, and rewrite that"
        )
    for uid, _subtask, handle in metadata.state_handles():
        kind = "incremental" if handle.incremental is not None else handle.kind
        if (kind is not None and kind not in _CANONICAL_TYPES) or handle.index is None:
            what = f"of type {kind!r}" if kind is not None else "that is not a state file"
            raise RewriteError(
                f"{directory} holds a state handle {what} for operator {uid!r}: only "
                "canonical state files (savepoints, full checkpoints) can be rewritten, "
                "not incremental RocksDB checkpoints. Take a savepoint first "
                "(`tidegate savepoint JOB DIR`) and rewrite the savepoint"
            )


def _empty_destination(storage: CheckpointStorage, dst: str) -> str:
    """`dst` in the storage's form; refuse one that exists and is not an empty directory."""
    fs, path = storage.fs, storage.fs._strip_protocol(dst)
    uri = dst.rstrip("/") if "://" in dst else path.rstrip("/")
    if fs.exists(path) and (not fs.isdir(path) or fs.ls(path, detail=False)):
        raise RewriteError(
            f"the destination {dst} exists and is not an empty directory; the rewritten "
            "savepoint needs a directory of its own. Choose a new path (it is created)"
        )
    return uri


# keyed state --------------------------------------------------------------------------------------
def _rewrite_keyed(
    storage: CheckpointStorage,
    directory: str,
    dst: str,
    uid: str,
    handles: list[StateHandle],
    max_parallelism: int,
    parallelism: int,
) -> tuple[dict[int, StateHandle], int]:
    """New state files of one keyed operator at `parallelism` subtasks; returns their handles
    by subtask and the number of (key, state) entries written."""
    operator_state = _operator_state_for(storage, directory, handles, parallelism, uid)
    subtasks: dict[int, StateHandle] = {}
    entries = 0
    for i in range(parallelism):
        owned = key_group_range(i, parallelism, max_parallelism)
        tables: dict[str, tuple[str, dict[Any, Any]]] = {}
        key_groups: dict[Any, int] = {}
        for name, kind, key, value in _old_entries(storage, directory, handles):
            kg = key_groups.get(key)
            if kg is None:
                kg = stable_hash(key) % max_parallelism
            if kg in owned:
                known, table = tables.setdefault(name, (kind, {}))
                if known != kind:
                    raise RewriteError(f"state {name!r} of {uid!r} has two kinds in {directory}")
                table[key] = value
                key_groups[key] = kg
                entries += 1
        snapshot = KeyedStateSnapshot(
            max_parallelism,
            owned,
            tables,
            lambda keys, memo=key_groups: list(map(memo.__getitem__, keys)),
        )
        stem = f"{file_safe(uid)}-{i}-rewritten"
        with storage.create_artifact(dst, stem, ".state") as f:
            index = write_state_file(f, snapshot, operator_state[i] or None)
        subtasks[i] = StateHandle(
            file=f.name, size=f.size, checksum=f.checksum, index=index, key_group_range=owned
        )
    return subtasks, entries


def _old_entries(
    storage: CheckpointStorage, directory: str, handles: list[StateHandle]
) -> Iterator[tuple[str, str, Any, Any]]:
    """(state name, kind, key, value) of every keyed entry in the old state files."""
    for handle in handles:
        if handle.key_group_range is None or handle.index is None:
            continue
        with storage.open_read(f"{directory}/{handle.file}") as f:
            for _kg, data in read_key_groups(f, handle.index, handle.key_group_range):
                for name, (kind, table) in data.items():
                    for key, value in table.items():
                        yield name, kind, key, value


def _operator_state_for(
    storage: CheckpointStorage,
    directory: str,
    handles: list[StateHandle],
    parallelism: int,
    uid: str,
) -> list[OperatorStateData]:
    """The operator state of a keyed operator's new subtasks: unchanged at the same parallelism;
    otherwise split state is redistributed as a restore would (so a later restore at any
    parallelism ends up with the same entries), union state is kept once (in subtask 0)."""
    old: list[OperatorStateData] = []
    for handle in handles:
        with storage.open_read(f"{directory}/{handle.file}") as f:
            old.append(read_operator_state(f, handle.index))
    if len(old) == parallelism:
        return old
    modes = {str(mode) for state in old for mode, _ in state.values()}
    unknown = modes - {RedistributionMode.SPLIT.value, RedistributionMode.UNION.value}
    if unknown:
        raise RewriteError(
            f"operator {uid!r} has operator state of mode(s) {sorted(unknown)}, which cannot be "
            f"moved from {len(old)} to {parallelism} subtasks offline. Rewrite at the old "
            f"parallelism (--parallelism {len(old)})"
        )
    new = redistribute_operator_state(old, parallelism)
    for state in new[1:]:
        for name, (mode, _entries) in list(state.items()):
            if mode == RedistributionMode.UNION.value:
                state[name] = (mode, [])
    return new


# files and metadata -------------------------------------------------------------------------------
def _copy_file(storage: CheckpointStorage, source: str, target: str) -> None:
    with storage.open_read(source) as src, storage.open_write(target) as out:
        while chunk := src.read(1 << 20):
            out.write(chunk)


def _new_metadata(
    old: CheckpointMetadata,
    directory: str,
    operators: dict[str, OperatorMetadata],
    max_parallelism: int,
) -> CheckpointMetadata:
    new = old.replace(
        is_savepoint=True,
        completed_ms=int(time.time() * 1000),
        max_parallelism=max_parallelism,
        operators=operators,
        channel_state={},
        rewritten_from=RewrittenFrom(
            path=directory,
            checkpoint_id=old.checkpoint_id,
            max_parallelism=old.max_parallelism,
            rewrite_id=uuid.uuid4().hex[:12],
        ),
    )
    return new.replace(size_bytes=new.written_bytes())

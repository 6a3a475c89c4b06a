"""The orphan sweep: delete the files of a job directory that no completed checkpoint in it
references, so that failures cannot make the directory grow without bound.

Failures leave files behind that nothing deletes: a `chk-<n>` directory whose checkpoint was in
progress when its driver died, state and channel-state files a subtask of a failed attempt wrote
after its checkpoint was aborted or completed without it, RocksDB files and changelogs uploaded
to `shared/` for a checkpoint that never completed. The JobMaster sweeps when an attempt starts:
after the new writer generation fenced the older ones and before the first checkpoint of the
attempt is triggered, every such file is garbage (a lingering writer of an old attempt may still
add one; the next sweep takes it).

`plan_sweep` decides (pure: the listing and the references in, what to delete out);
`sweep_job_dir` lists, reads `_metadata` files and deletes. Kept whatever the plan: the fence,
`_metadata` files, files not named like a checkpoint's (`.storage-check-*`, anything a user put
there), completed checkpoints' referenced files; and everything in `shared/` as soon as one
`_metadata` cannot be read (what it references is unknown).
"""

from __future__ import annotations

import logging
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tidegate.checkpoint.metadata import METADATA_FILE_NAME, CheckpointMetadata
from tidegate.checkpoint.storage import CHECKPOINT_DIR, CheckpointStorage
from tidegate.state.incremental_handles import SHARED_DIR_NAME, relative_to, resolve

log = logging.getLogger(__name__)

#: files a checkpoint's writers create in its directory: state, channel state, a `_metadata`
#: being written
_CHECKPOINT_FILE = re.compile(r".+\.state|channels-.+\.inflight|_metadata\.tmp-.+")

#: a checkpoint directory whose `_metadata` could not be read
UNREADABLE = None


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep deletes, relative to the job directory."""

    #: `chk-<n>` directories without `_metadata`: the whole directory
    directories: tuple[str, ...] = ()
    #: files no completed checkpoint references
    files: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.directories or self.files)


def plan_sweep(
    files: Iterable[str],
    references: Mapping[str, frozenset[str] | None],
    checkpoint_dirs: Iterable[str] = (),
) -> SweepPlan:
    """What to delete of a job directory holding `files` (relative paths, e.g.
    `chk-3/op-0-g1-ab.state`, `shared/x.sst`) and the `checkpoint_dirs` (`chk-<n>` names, with
    the empty ones: a discard that raced a failed attempt's writer, which then deleted its
    partial file, leaves one), whose `chk-<n>` directories with a `_metadata` are the keys of
    `references`, each with the job-directory-relative files it references (UNREADABLE: its
    `_metadata` could not be read)."""
    directories = {
        d for d in checkpoint_dirs if CHECKPOINT_DIR.fullmatch(d) and d not in references
    }
    orphans: list[str] = []
    referenced = frozenset().union(*(r for r in references.values() if r is not UNREADABLE))
    shared_known = UNREADABLE not in references.values()
    for path in sorted(files):
        top, _, rest = path.partition("/")
        if not rest:
            continue  # the job directory's own files: the fence's, storage checks, ...
        if CHECKPOINT_DIR.fullmatch(top):
            if top not in references:
                directories.add(top)
            elif (
                references[top] is not UNREADABLE
                and path not in referenced
                and _CHECKPOINT_FILE.fullmatch(posixpath.basename(path))
            ):
                orphans.append(path)
        elif top == SHARED_DIR_NAME and shared_known and path not in referenced:
            orphans.append(path)
    return SweepPlan(tuple(sorted(directories)), tuple(orphans))


def referenced_files(
    metadata: CheckpointMetadata, checkpoint_dir: str, job_dir: str
) -> frozenset[str]:
    """The files `metadata` (read from `checkpoint_dir`) references, relative to `job_dir`;
    files outside the job directory (another job's shared files) are left out."""
    stored = []
    for _, _, handle in metadata.state_handles():
        stored.append(handle.file)
        if handle.incremental is not None:
            stored += [f.file for f in handle.incremental.files]
    for channels in metadata.channel_state.values():
        stored += [h.file for h in channels.subtasks.values()]
    found = set()
    for file in stored:
        relative = relative_to(job_dir, resolve(checkpoint_dir, file))
        if not relative.startswith("../") and "://" not in relative and relative != "..":
            found.add(relative)
    return frozenset(found)


def plan_job_dir_sweep(storage: CheckpointStorage) -> SweepPlan:
    """What a sweep of `storage`'s job directory would delete (`plan_sweep` over its listing
    and its completed checkpoints' references); deletes nothing."""
    job_dir = storage.job_dir.rstrip("/")
    files = storage.list_files()
    references: dict[str, frozenset[str] | None] = {}
    for path in files:
        top, _, rest = path.partition("/")
        if rest == METADATA_FILE_NAME and CHECKPOINT_DIR.fullmatch(top):
            checkpoint_dir = f"{job_dir}/{top}"
            try:
                metadata = storage.read_metadata(checkpoint_dir)
            except Exception as e:  # corrupt: the integrity checks report it; keep its files
                log.warning("sweep: cannot read %s/_metadata (%s): kept", checkpoint_dir, e)
                references[top] = UNREADABLE
                continue
            references[top] = referenced_files(metadata, checkpoint_dir, job_dir)
    return plan_sweep(files, references, storage.checkpoint_dir_names())


def sweep_job_dir(storage: CheckpointStorage) -> SweepPlan:
    """Delete what `plan_job_dir_sweep` finds in `storage`'s job directory; returns the plan.
    A file that cannot be deleted is logged and left (the next sweep tries again)."""
    job_dir = storage.job_dir.rstrip("/")
    plan = plan_job_dir_sweep(storage)
    for directory in plan.directories:
        _best_effort(storage.discard_checkpoint_dir, f"{job_dir}/{directory}")
    for file in plan.files:
        _best_effort(storage.delete_file, f"{job_dir}/{file}")
    if plan:
        log.info(
            "sweep of %s: deleted %d unfinished checkpoint director%s and %d file(s) no "
            "completed checkpoint references",
            job_dir,
            len(plan.directories),
            "y" if len(plan.directories) == 1 else "ies",
            len(plan.files),
        )
    return plan


def _best_effort(delete: Callable[[str], None], path: str) -> None:
    try:
        delete(path)
    except Exception as e:
        log.warning(
            "sweep: could not delete %s (%s: %s); the next sweep tries again",
            path,
            type(e).__name__,
            e,
        )

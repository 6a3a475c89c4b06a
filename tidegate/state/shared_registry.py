"""The shared-state registry (Flink's `SharedStateRegistry`): which files under
`<checkpoint-dir>/<job-id>/shared/` the retained checkpoints still use, and which may go.

Incremental checkpoints of the rocksdb backend upload each SST file once and let later
checkpoints reference it (docs/checkpoint-format.md, "Incremental keyed state"). A shared file
is deleted only when no retained checkpoint references it *and* no running backend can still
reference it. The second condition closes a race Flink had: a backend reuses the files of the
last checkpoint it *knows* completed (its base). The driver may already have subsumed that
checkpoint, so a snapshot in flight can still name a file whose last reference just went.
Each incremental handle therefore records its backend and base; a file is deleted once every
backend that ever referenced it either is absent from the newest completed checkpoint (an
earlier attempt, or a rescaled one) or has a base at least as new as the file's last use.

Savepoints never reference shared files: they are canonical and self-contained, so the
registry ignores them. Pure logic, no I/O: callers delete the paths it hands out.

Protocol (the JobMaster and the CompletedCheckpointStore drive it):

1. `register(refs)` when a checkpoint completes (the store adds it);
2. `unregister(checkpoint_id)` when the store subsumes it;
3. `take_unused()` returns the files that became deletable (delete them);
4. `discard_uncompleted(refs)` for a checkpoint that never completed (declined, expired,
   subsumed while pending, late acks): the files it uploaded that nothing registered uses;
5. on restore: `register(refs, restored=True)` for a claimed snapshot, `pin(refs)` for other
   retained snapshots the job does not own, `protect(prefix)` for a directory whose snapshots
   could not be read; `release_all()` when the job's checkpoints are deleted at its end.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SharedReference:
    """One shared file named by one subtask's incremental handle."""

    #: absolute path or URI of the file (normalised: no `..`)
    path: str
    #: the backend instance that referenced it (a uuid per keyed backend)
    backend_id: str
    #: True if this checkpoint uploaded it (False: reused from an earlier one)
    uploaded: bool


@dataclass(frozen=True)
class CheckpointReferences:
    """Every shared file one checkpoint references, and each backend's base."""

    checkpoint_id: int
    references: tuple[SharedReference, ...] = ()
    #: backend id -> the checkpoint whose files it reused (None: it reused nothing)
    bases: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(r.path for r in self.references)


@dataclass
class _Entry:
    checkpoints: set[int]
    #: the newest checkpoint that referenced the file
    last_used: int
    #: backends that referenced it (they may reference it again while their base is older)
    users: set[str]
    #: registered from a snapshot this job restored (not uploaded by one of its checkpoints)
    restored: bool


class SharedStateRegistry:
    """Reference counts of shared files across the retained checkpoints. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._by_checkpoint: dict[int, frozenset[str]] = {}
        #: every checkpoint ever registered (a subsumed one is not "uncompleted")
        self._registered_ids: set[int] = set()
        #: files of retained snapshots the job does not own: never deleted
        self._pinned: set[str] = set()
        #: path prefixes (shared directories) whose restored files are never deleted
        self._protected: list[str] = []
        #: unreferenced files some backend may still reference, until its base moves on
        self._orphans: set[str] = set()
        self._unused: list[str] = []
        #: the newest checkpoint the job completed: its bases decide which orphans may go
        self._newest: CheckpointReferences | None = None

    # Step 1 ------------------------------------------------------------------------------------
    def register(self, refs: CheckpointReferences, *, restored: bool = False) -> None:
        """A checkpoint completed (or, `restored`, a claimed snapshot joined the store)."""
        with self._lock:
            cid = refs.checkpoint_id
            if cid in self._by_checkpoint:
                raise ValueError(f"checkpoint {cid} is registered already")
            self._by_checkpoint[cid] = refs.paths
            self._registered_ids.add(cid)
            for ref in refs.references:
                entry = self._entries.get(ref.path)
                if entry is None:
                    entry = self._entries[ref.path] = _Entry(set(), cid, set(), restored)
                entry.checkpoints.add(cid)
                entry.last_used = max(entry.last_used, cid)
                entry.users.add(ref.backend_id)
                self._orphans.discard(ref.path)
            if not restored:
                self._newest = refs
                self._collect()

    def references_unknown(self, refs: CheckpointReferences) -> list[str]:
        """Reused files (not uploaded by `refs`' checkpoint) the registry does not know: the
        checkpoint would name deleted files and must not complete."""
        with self._lock:
            return sorted(
                r.path for r in refs.references if not r.uploaded and r.path not in self._entries
            )

    # Step 2 ------------------------------------------------------------------------------------
    def unregister(self, checkpoint_id: int) -> None:
        """The checkpoint is no longer retained (subsumed, or deleted at the job's end)."""
        with self._lock:
            for path in self._by_checkpoint.pop(checkpoint_id, frozenset()):
                entry = self._entries[path]
                entry.checkpoints.discard(checkpoint_id)
                if not entry.checkpoints:
                    self._orphans.add(path)
            self._collect()

    def _collect(self) -> None:
        """Under the lock: orphans no backend of the newest checkpoint can reference again."""
        newest = self._newest
        if newest is None:
            return
        for path in sorted(self._orphans):
            entry = self._entries[path]
            safe = all(
                user not in newest.bases or (newest.bases[user] or -1) >= entry.last_used
                for user in entry.users
            )
            if safe:
                self._orphans.discard(path)
                del self._entries[path]
                if self._deletable(path, entry):
                    self._unused.append(path)

    def _deletable(self, path: str, entry: _Entry) -> bool:
        if path in self._pinned:
            return False
        return not (entry.restored and any(path.startswith(p) for p in self._protected))

    # Step 3 ------------------------------------------------------------------------------------
    def take_unused(self) -> list[str]:
        """The files that became deletable since the last call (each is handed out once)."""
        with self._lock:
            unused, self._unused = self._unused, []
            return unused

    # Step 4 ------------------------------------------------------------------------------------
    def discard_uncompleted(self, refs: CheckpointReferences) -> list[str]:
        """Files uploaded by a checkpoint that never completed and that no registered
        checkpoint uses (a backend reuses only files of completed checkpoints, so no other
        checkpoint can reference them). A checkpoint that was ever registered (retained, or
        subsumed since) returns nothing: its files are released by `unregister`."""
        with self._lock:
            if refs.checkpoint_id in self._registered_ids:
                return []
            return sorted(
                r.path
                for r in refs.references
                if r.uploaded and r.path not in self._entries and r.path not in self._pinned
            )

    # Step 5 ------------------------------------------------------------------------------------
    def pin(self, paths: Iterable[str]) -> None:
        """Files of snapshots the job does not own (NO_CLAIM, or retained beside a claimed
        one): the job never deletes them."""
        with self._lock:
            self._pinned.update(paths)

    def protect(self, prefix: str) -> None:
        """Never delete restored files under `prefix` (a shared directory holding snapshots
        whose references could not be read)."""
        with self._lock:
            self._protected.append(prefix.rstrip("/") + "/")

    def release_all(self) -> list[str]:
        """Every file the job may delete, when all its checkpoints are deleted (job end)."""
        with self._lock:
            paths = [p for p, e in self._entries.items() if self._deletable(p, e)]
            self._entries.clear()
            self._by_checkpoint.clear()
            self._orphans.clear()
            unused, self._unused = self._unused, []
            return sorted({*paths, *unused})

    @property
    def registered(self) -> dict[str, int]:
        """path -> number of retained checkpoints referencing it (for tests and tools)."""
        with self._lock:
            return {p: len(e.checkpoints) for p, e in self._entries.items() if e.checkpoints}

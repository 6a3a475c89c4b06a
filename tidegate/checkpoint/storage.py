"""Where checkpoint files live: `<base>/<job-id>/chk-<n>/` on any fsspec filesystem.

Paths handed out and accepted here are strings in the form the user gave the base in: a URI
(`s3://bucket/ckpt/job/chk-3`, `memory://...`, `file:///...`) or, for a plain local path, an
absolute path, so they can be stored in metadata and used from any process (driver or slot).
A checkpoint is *completed* exactly when its directory holds `_metadata`, which is written last,
atomically, and never over an existing one.

A storage created with a `generation` is a fenced writer (checkpoint/fencing.py): it names the
files it creates after its generation, and refuses to write or delete once a newer generation
took over the job directory.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import re
import uuid
from typing import BinaryIO

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from tidegate.checkpoint.errors import (
    CheckpointNotFoundError,
    CheckpointStorageError,
)
from tidegate.checkpoint.fencing import WriterFence, create_new_file
from tidegate.checkpoint.metadata import (
    METADATA_FILE_NAME,
    CheckpointMetadata,
    decode_metadata,
    encode_metadata,
)
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.state.checksums import ChecksummingWriter

log = logging.getLogger(__name__)

#: a checkpoint directory's name (its id the group)
CHECKPOINT_DIR = re.compile(r"chk-(\d+)")
#: stores where one put is atomic (readers see all of the object or none of it)
_ATOMIC_PUT_PROTOCOLS = frozenset(
    {"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "memory"}
)
#: job directories probed when a checkpoint base directory is passed to a restore (for the hint)
_MAX_HINTED_JOB_DIRS = 20
#: errors of os.link on filesystems without hard links (some network and FUSE mounts)
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})
#: fsync errors of a filesystem that cannot fsync a directory (not a failed write)
_NO_DIRECTORY_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


class CheckpointStorage:
    """The checkpoint directory of one job. Safe to use from several threads."""

    def __init__(
        self,
        base_uri: str,
        job_id: str,
        filesystems: FileSystems = NO_OPTIONS,
        *,
        generation: int | None = None,
    ) -> None:
        if not job_id or "/" in job_id or job_id in (".", ".."):
            raise ValueError(f"invalid job id {job_id!r}: it is used as a directory name")
        #: the job's filesystem options: for the base and for any other URL (savepoints)
        self.filesystems = filesystems
        self.fs, root = filesystems.resolve(base_uri)
        self.base_uri = base_uri if "://" in base_uri else root
        self.job_id = job_id
        self.job_dir = _join(self.base_uri, job_id)
        self.fence = WriterFence(self.fs, self._fs_path(self.job_dir), self.job_dir)
        #: the writer generation this storage writes as; None: an unfenced reader or tool
        self.generation = generation

    def start_generation(self) -> int:
        """Take the job directory's next writer generation and write as it from now on (a
        JobMaster does this before every attempt). Writers of older generations are refused
        from then on. Raises FencedWriterError if this storage's own generation was superseded
        meanwhile: another driver owns the job directory, and this one must not take it back."""
        self.generation = self.fence.advance(expected=self.generation)
        self.abort_stale_uploads()
        return self.generation

    def abort_stale_uploads(self) -> int:
        """Abort the unfinished multipart uploads under the job directory (object stores
        only), and return how many. A writer killed while uploading a large state file leaves
        its parts stored (and billed) but invisible; once a new generation started, every
        upload under the job directory belongs to an older one, which may no longer write.
        Best effort: a store that cannot list uploads is logged, not fatal."""
        if not hasattr(self.fs, "list_multipart_uploads"):  # not an S3 filesystem
            return 0
        bucket, _, prefix = self._fs_path(self.job_dir).partition("/")
        aborted = 0
        try:
            for key, upload_id in self._unfinished_uploads(bucket, f"{prefix}/"):
                self.fs.call_s3(
                    "abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id
                )
                aborted += 1
        except Exception as exc:
            log.warning(
                "could not abort unfinished uploads under %s (%s: %s): their parts stay "
                "stored; an AbortIncompleteMultipartUpload lifecycle rule removes them",
                self.job_dir,
                type(exc).__name__,
                exc,
            )
        if aborted:
            log.info(
                "aborted %d unfinished upload(s) of earlier attempts under %s",
                aborted,
                self.job_dir,
            )
        return aborted

    def _unfinished_uploads(self, bucket: str, prefix: str) -> list[tuple[str, str]]:
        """(key, upload id) of every unfinished upload under `prefix`, asking S3 for that
        prefix only and following its pages (s3fs's `list_multipart_uploads` lists the whole
        bucket, first page only)."""
        found: list[tuple[str, str]] = []
        markers: dict[str, str] = {}
        while True:
            page = self.fs.call_s3(
                "list_multipart_uploads", Bucket=bucket, Prefix=prefix, **markers
            )
            found += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
            if not page.get("IsTruncated"):
                return found
            markers = {
                "KeyMarker": page["NextKeyMarker"],
                "UploadIdMarker": page["NextUploadIdMarker"],
            }

    def checkpoint_dir(self, checkpoint_id: int) -> str:
        return _join(self.job_dir, f"chk-{checkpoint_id}")

    def create_checkpoint_dir(self, checkpoint_id: int) -> str:
        path = self.checkpoint_dir(checkpoint_id)
        self.create_dir(path)
        return path

    def create_dir(self, path: str) -> None:
        """Create a directory (and its parents), here or on another filesystem (savepoints)."""
        fs, fs_path = self._resolve(path)
        fs.makedirs(fs_path, exist_ok=True)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a whole file (creating its directory); not atomic, for state files."""
        fs, fs_path = self._resolve(path)
        fs.makedirs(posixpath.dirname(fs_path), exist_ok=True)
        fs.pipe_file(fs_path, data)

    def read_bytes(self, path: str) -> bytes:
        fs, fs_path = self._resolve(path)
        return fs.cat_file(fs_path)

    def open_write(self, path: str) -> BinaryIO:
        """Open a new file for writing (creating its directory)."""
        fs, fs_path = self._resolve(path)
        fs.makedirs(posixpath.dirname(fs_path), exist_ok=True)
        return fs.open(fs_path, "wb")

    def create_artifact(self, directory: str, stem: str, suffix: str) -> ChecksummingWriter:
        """Create a new file of a checkpoint in `directory`: `<stem>-g<generation>-<12 hex>
        <suffix>`, a name no other writer uses. Returns a writer that checksums what is written:
        once it is closed, its `name`, `size` and `checksum` go into the state handle the
        subtask acknowledges. Raises FencedWriterError if a newer generation took over."""
        self.check_fence(f"write a file into {directory}")
        tag = f"-g{self.generation}" if self.generation is not None else ""
        name = f"{stem}{tag}-{uuid.uuid4().hex[:12]}{suffix}"
        path = _join(directory, name)
        return ChecksummingWriter(self.open_write(path), name, path)

    def open_read(self, path: str) -> BinaryIO:
        """Open a file for reading; the file is seekable."""
        fs, fs_path = self._resolve(path)
        return fs.open(fs_path, "rb")

    def size_of(self, path: str) -> int:
        """Total bytes of a file or of everything under a directory."""
        fs, fs_path = self._resolve(path)
        return int(fs.du(fs_path, total=True))

    def write_metadata(self, checkpoint_dir: str, metadata: CheckpointMetadata) -> str:
        """Write `<checkpoint_dir>/_metadata` atomically, never over an existing one, and
        return its path.

        Readers see either no `_metadata` or the complete file, never a partial one: locally it
        is written to `_metadata.tmp-<uuid>`, fsynced and hard-linked to its name (which fails
        if the name exists); on object stores a single conditional put is atomic already.
        A fenced storage checks the fence before and after: a writer superseded meanwhile gets
        FencedWriterError (a `_metadata` it published just before stays, but it must not act on
        it). Raises CheckpointStorageError, also when `_metadata` exists already.
        """
        data = encode_metadata(metadata)
        final = _join(checkpoint_dir, METADATA_FILE_NAME)
        fs, fs_final = self._resolve(final)
        self.check_fence(f"write {final}")
        try:
            fs.makedirs(posixpath.dirname(fs_final), exist_ok=True)
            if isinstance(fs, LocalFileSystem):
                _write_local_atomically(fs_final, data)
            elif _protocols(fs) & _ATOMIC_PUT_PROTOCOLS:
                create_new_file(fs, fs_final, data)
            else:
                _write_via_rename(fs, fs_final, data)
        except FileExistsError as exc:
            raise CheckpointStorageError(
                f"refusing to write checkpoint metadata {final}: it exists already, and a "
                "completed checkpoint is never overwritten (another writer completed this "
                "checkpoint id); this checkpoint is not completed."
            ) from exc
        except OSError as exc:
            raise CheckpointStorageError(
                f"could not write checkpoint metadata {final}: {exc}. Check that the checkpoint "
                "directory is writable and has free space; this checkpoint is not completed."
            ) from exc
        self.check_fence(f"complete the checkpoint {checkpoint_dir}")
        return final

    def read_metadata(self, checkpoint_dir: str) -> CheckpointMetadata:
        """Read and validate `<checkpoint_dir>/_metadata`."""
        return read_checkpoint_metadata(checkpoint_dir, self.filesystems)

    def discard_checkpoint_dir(self, path: str) -> None:
        """Delete a checkpoint directory and everything in it; a missing one is fine.

        Refuses paths outside this job's directory: this is a recursive delete. A fenced
        storage raises FencedWriterError once a newer generation took over (the newer one may
        be restoring from that very checkpoint). A file a writer of a failed attempt adds while
        the directory is deleted leaves it behind, with a warning: the orphan sweep of the
        next attempt takes it (checkpoint/sweep.py).
        """
        fs_path = self._fs_path(path).rstrip("/")
        if not fs_path.startswith(self._fs_path(self.job_dir).rstrip("/") + "/"):
            raise ValueError(f"refusing to delete {path}: it is not inside {self.job_dir}")
        self.check_fence(f"delete {path}")
        try:
            self.fs.rm(fs_path, recursive=True)
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno != errno.ENOTEMPTY:
                raise
            log.warning("%s was left behind: a file was written into it meanwhile (%s)", path, e)

    def delete_file(self, path: str) -> None:
        """Delete one file (a shared file no checkpoint uses any more); a missing one is fine.
        A fenced storage raises FencedWriterError once a newer generation took over."""
        self.check_fence(f"delete {path}")
        fs, fs_path = self._resolve(path)
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(fs_path)

    def list_files(self) -> list[str]:
        """Every file below the job directory, relative to it (`chk-3/_metadata`, ...)."""
        fs_dir = self._fs_path(self.job_dir).rstrip("/")
        try:
            listed = self.fs.find(fs_dir, withdirs=False)
        except FileNotFoundError:
            return []
        return sorted(p[len(fs_dir) + 1 :] for p in listed if p.startswith(fs_dir + "/"))

    def list_checkpoints(self) -> list[tuple[int, str]]:
        """The completed checkpoints (chk-<n> directories holding `_metadata`), by id."""
        return _completed_checkpoints(self.fs, self._fs_path(self.job_dir), self.job_dir)

    def checkpoint_dir_names(self) -> list[str]:
        """The names of the chk-<n> entries of the job directory, completed or not, empty ones
        too ([] if there is no job directory)."""
        try:
            names = self.fs.ls(self._fs_path(self.job_dir), detail=False)
        except FileNotFoundError:
            return []
        names = (posixpath.basename(n.rstrip("/")) for n in names)
        return sorted(n for n in names if CHECKPOINT_DIR.fullmatch(n))

    def highest_checkpoint_id(self) -> int:
        """The highest n of any chk-<n> directory in the job directory, completed or not (0 if
        there is none): a new checkpoint must not reuse an existing directory."""
        found = (CHECKPOINT_DIR.fullmatch(n) for n in self.checkpoint_dir_names())
        return max((int(m.group(1)) for m in found if m), default=0)

    def verify_writable(self) -> None:
        """Create the job directory and write a probe file, or raise CheckpointStorageError
        saying which path failed and what to do. Run it before starting the job."""
        probe = self._fs_path(_join(self.job_dir, f".write-probe-{uuid.uuid4().hex}"))
        try:
            self.fs.makedirs(self._fs_path(self.job_dir), exist_ok=True)
            self.fs.pipe_file(probe, b"")
            self.fs.rm_file(probe)
        except Exception as exc:
            raise CheckpointStorageError(
                f"cannot write checkpoints to {self.job_dir} ({type(exc).__name__}: {exc}). "
                "Set the checkpoint directory to a location this process can create and write; "
                "on a cluster it must be a shared filesystem (HDFS, S3, NFS, ...) that every "
                "executor can reach."
            ) from exc

    def _fs_path(self, path: str) -> str:
        return self.fs._strip_protocol(path)

    def check_fence(self, action: str) -> None:
        """Raise FencedWriterError if a newer generation took over (a fenced storage only)."""
        if self.generation is not None:
            self.fence.check(self.generation, action)

    def _resolve(self, path: str) -> tuple[AbstractFileSystem, str]:
        """The filesystem and its path for `path`: the storage's own, or, for a URI of another
        filesystem (a savepoint directory elsewhere), that one."""
        protocol, sep, _ = path.partition("://")
        if sep and protocol not in _protocols(self.fs):
            return self.filesystems.resolve(path)
        return self.fs, self._fs_path(path)


def _write_via_rename(fs: AbstractFileSystem, fs_final: str, data: bytes) -> None:
    tmp = f"{fs_final}.tmp-{uuid.uuid4().hex}"
    try:
        fs.pipe_file(tmp, data)
        if fs.exists(fs_final):  # a rename may replace: check first (not atomic here)
            raise FileExistsError(fs_final)
        fs.mv(tmp, fs_final)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.rm_file(tmp)
        raise


def read_checkpoint_metadata(
    checkpoint_dir: str, filesystems: FileSystems = NO_OPTIONS
) -> CheckpointMetadata:
    """Read and validate `<checkpoint_dir>/_metadata`, on whatever filesystem it is (a
    restore may read a checkpoint or savepoint that is not in the job's own storage)."""
    path = _join(checkpoint_dir, METADATA_FILE_NAME)
    fs, fs_path = filesystems.resolve(path)
    try:
        data = fs.cat_file(fs_path)
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(
            f"{checkpoint_dir} holds no {METADATA_FILE_NAME}: the checkpoint did not "
            "complete or was discarded; restore from a completed one."
        ) from exc
    return decode_metadata(data, path)


def resolve_checkpoint_path(path: str, filesystems: FileSystems = NO_OPTIONS) -> str:
    """Return the checkpoint directory to restore from, given one of:

    - a checkpoint (or savepoint) directory holding `_metadata`,
    - a `_metadata` file,
    - a job directory `<checkpoint-dir>/<job-id>`: its latest completed `chk-<n>`.

    Raises CheckpointNotFoundError saying what was looked for, and where, otherwise.
    """
    return checkpoint_candidates(path, filesystems)[0]


def checkpoint_candidates(path: str, filesystems: FileSystems = NO_OPTIONS) -> list[str]:
    """The checkpoint directories a restore from `path` may use, newest first: the one
    directory `path` names (as `resolve_checkpoint_path`), or for a job directory all its
    completed `chk-<n>` (a restore falls back to older ones only when the user allows it)."""
    fs, fs_path = filesystems.resolve(path)
    uri = path.rstrip("/") if "://" in path else fs_path
    name = posixpath.basename(fs_path.rstrip("/"))
    if name == METADATA_FILE_NAME:
        if fs.isfile(fs_path):
            return [uri.rsplit("/", 1)[0]]
        raise CheckpointNotFoundError(f"checkpoint metadata file {path} does not exist.")
    if not fs.isdir(fs_path):
        what = "is a file, not a checkpoint directory" if fs.exists(fs_path) else "does not exist"
        raise CheckpointNotFoundError(
            f"cannot restore from {path}: it {what}. Pass a chk-<n> directory, its "
            f"{METADATA_FILE_NAME} file, or the job directory <checkpoint-dir>/<job-id>."
        )
    if fs.isfile(posixpath.join(fs_path, METADATA_FILE_NAME)):
        return [uri]
    completed = _completed_checkpoints(fs, fs_path, uri)
    if completed:
        return [directory for _, directory in reversed(completed)]
    if CHECKPOINT_DIR.fullmatch(name):
        raise CheckpointNotFoundError(
            f"{path} holds no {METADATA_FILE_NAME}: that checkpoint did not complete (or was "
            "being discarded). Restore from a completed one, e.g. pass the job directory "
            f"{uri.rsplit('/', 1)[0]} to use its latest completed checkpoint."
        )
    raise CheckpointNotFoundError(
        f"no completed checkpoint in {path}: looked for {METADATA_FILE_NAME} and for "
        f"chk-<n>/{METADATA_FILE_NAME}.{_job_dirs_hint(fs, fs_path, uri)}"
    )


def _completed_checkpoints(
    fs: AbstractFileSystem, fs_dir: str, uri_dir: str
) -> list[tuple[int, str]]:
    try:
        entries = fs.ls(fs_dir, detail=True)
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        name = posixpath.basename(entry["name"].rstrip("/"))
        match = CHECKPOINT_DIR.fullmatch(name)
        if (
            match
            and entry["type"] == "directory"
            and fs.isfile(posixpath.join(fs_dir, name, METADATA_FILE_NAME))
        ):
            found.append((int(match.group(1)), _join(uri_dir, name)))
    return sorted(found)


def _job_dirs_hint(fs: AbstractFileSystem, fs_dir: str, uri_dir: str) -> str:
    """If `fs_dir` looks like a checkpoint base directory, name its job directories."""
    subdirs = [e for e in fs.ls(fs_dir, detail=True) if e["type"] == "directory"]
    jobs = []
    for entry in subdirs[:_MAX_HINTED_JOB_DIRS]:
        name = posixpath.basename(entry["name"].rstrip("/"))
        if _completed_checkpoints(fs, posixpath.join(fs_dir, name), ""):
            jobs.append(_join(uri_dir, name))
    if not jobs:
        return " Is this the right directory? The job may not have completed a checkpoint yet."
    return f" This looks like a checkpoint base directory; pass a job directory: {', '.join(jobs)}"


def _write_local_atomically(final: str, data: bytes) -> None:
    """Publish `data` as `final` completely or not at all, never replacing an existing file:
    a hard link to a fully written temporary file fails atomically if `final` exists."""
    directory = os.path.dirname(final)
    tmp = os.path.join(directory, f"{METADATA_FILE_NAME}.tmp-{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, final)
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            # a filesystem without hard links: check, then rename (a rename would replace)
            if os.path.exists(final):
                raise FileExistsError(errno.EEXIST, "file exists", final) from exc
            os.rename(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _sync_directory(directory, final)


def _sync_directory(directory: str, entry: str) -> None:
    """Make the new directory entry `entry` durable by fsyncing `directory`. A filesystem that
    cannot fsync directories (EINVAL, ENOTSUP, ENOSYS) makes it as durable as it can; any
    other failure removes `entry` (what is not durable is not published) and raises OSError
    saying so."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno in _NO_DIRECTORY_SYNC:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry)
        raise OSError(
            exc.errno,
            f"{exc.strerror} while making it durable (fsync of the directory {directory} "
            "failed, so the file was removed)",
        ) from exc
    finally:
        os.close(fd)


def _protocols(fs: AbstractFileSystem) -> frozenset[str]:
    protocol = fs.protocol
    return frozenset([protocol] if isinstance(protocol, str) else protocol)


def _join(base: str, name: str) -> str:
    return f"{base}{name}" if base.endswith("/") else f"{base}/{name}"

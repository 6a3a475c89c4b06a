"""Exactly-once file sink by two-phase commit (Flink's FileSink), on any fsspec fs, in a row
format (records encoded one by one by an Encoder) or a bulk format (a BulkWriter per part file,
such as Parquet's, which buffers records and writes a footer when the file is finished).

The protocol per sink subtask (steps marked in the code); finished output is exactly the files
whose names do not start with '.', so a plain glob reads it:

1. Write: records go, per bucket, into one open hidden in-progress part file
   `<base>/<bucket>/.<prefix>-<subtask>-<attempt>-<counter><suffix>.inprogress`.
2. Roll: the rolling policy may close a part file between checkpoints; it becomes pending.
   Bulk formats roll on checkpoints only (Flink's rule): their writer finishes the file then.
3. Pre-commit (`prepare_commit`): every open part file is flushed, fsync'd and closed; the
   committables `(in-progress path, final path)` of all pending files are returned.
4. Commit (once the checkpoint completed): rename each in-progress file to its final name
   `<base>/<bucket>/<prefix>-<subtask>-<attempt>-<counter><suffix>`; idempotent. On object
   stores a rename is a copy then a delete: the copy creates the final object whole, so a
   reader sees all of it or nothing, and a commit interrupted between the two (both files
   exist) copies again and deletes.
5. Recover (before a restarted writer starts): delete the in-progress files of earlier
   attempts not referenced by the restored checkpoint (the job re-produces them), of the
   writer indexes this subtask takes over (its own; after a scale-down also vanished ones).
"""

from __future__ import annotations

import contextlib
import enum
import io
import os
import posixpath
import re
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass, field, replace
from datetime import datetime
from typing import IO, Any
from zoneinfo import ZoneInfo

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.common.serialization import BulkWriter, BulkWriterFactory, Encoder
from tidegate.common.typeinfo import TypeInformation
from tidegate.connectors.base import writer_subtask


@dataclass(frozen=True, slots=True)
class FileSinkCommittable:
    """A closed (pending) part file and the name it becomes visible under when committed."""

    in_progress_path: str
    final_path: str


class CommitAction(enum.Enum):
    RENAME = "rename"
    ALREADY_COMMITTED = "already_committed"
    LOST = "lost"


def commit_action(in_progress_exists: bool, final_exists: bool) -> CommitAction:
    """What committing one committable means, given which of its two files exist.

    If both exist, an earlier non-atomic move was interrupted: renaming again replaces the copy.
    """
    if in_progress_exists:
        return CommitAction.RENAME
    return CommitAction.ALREADY_COMMITTED if final_exists else CommitAction.LOST


@dataclass(frozen=True, slots=True)
class OutputFileConfig:
    """Part file names: `<part_prefix>-<subtask>-<attempt>-<counter><part_suffix>`."""

    part_prefix: str = "part"
    part_suffix: str = ""

    def __post_init__(self) -> None:
        if not self.part_prefix or "/" in self.part_prefix + self.part_suffix:
            raise ValueError(f"need a part prefix, and no '/' in prefix or suffix: {self}")

    @staticmethod
    def builder() -> OutputFileConfigBuilder:
        return OutputFileConfigBuilder()


@dataclass(slots=True)
class OutputFileConfigBuilder:
    part_prefix: str = "part"
    part_suffix: str = ""

    def with_part_prefix(self, prefix: str) -> OutputFileConfigBuilder:
        self.part_prefix = prefix
        return self

    def with_part_suffix(self, suffix: str) -> OutputFileConfigBuilder:
        self.part_suffix = suffix
        return self

    def build(self) -> OutputFileConfig:
        return OutputFileConfig(self.part_prefix, self.part_suffix)


@dataclass(frozen=True, slots=True)
class RollingPolicy:
    """When to close a part file before the next checkpoint (every checkpoint closes them all).

    `part_size` in bytes: a part file holding at least this much is rolled before its next
    record. `rollover_interval` (age) and `inactivity_interval` (time since the last write) in
    milliseconds, checked whenever the writer receives a batch. None disables a rule.
    """

    part_size: int | None = None
    rollover_interval: int | None = None
    inactivity_interval: int | None = None

    def __post_init__(self) -> None:
        if any(value is not None and value <= 0 for value in astuple(self)):
            raise ValueError(f"part size and intervals must be > 0: {self}")

    @staticmethod
    def default_rolling_policy(
        part_size: int = 128 * 1024 * 1024,
        rollover_interval: int = 60 * 1000,
        inactivity_interval: int = 60 * 1000,
    ) -> RollingPolicy:
        return RollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> RollingPolicy:
        """Roll only on checkpoints (the only policy of bulk formats)."""
        return RollingPolicy()

    @property
    def rolls_on_checkpoint_only(self) -> bool:
        return self == RollingPolicy.on_checkpoint_rolling_policy()

    @property
    def has_time_limits(self) -> bool:
        return self.rollover_interval is not None or self.inactivity_interval is not None

    def should_roll_on_event(self, size: int) -> bool:
        return self.part_size is not None and size >= self.part_size

    def should_roll_on_processing_time(self, age_ms: int, idle_ms: int) -> bool:
        too_old = self.rollover_interval is not None and age_ms >= self.rollover_interval
        too_idle = self.inactivity_interval is not None and idle_ms >= self.inactivity_interval
        return too_old or too_idle


class BucketAssigner:
    """Chooses a record's bucket: a relative directory under the base path.

    This base class puts every record into the base path (bucket ''); subclass and override
    `get_bucket_id` to bucket otherwise (`now_ms` is the processing time of the batch).
    """

    def batch_bucket_id(self, now_ms: int) -> str | None:
        """The bucket of every record written at `now_ms` when it does not depend on the
        record (so a batch is written in one go), else None."""
        if type(self).get_bucket_id is BucketAssigner.get_bucket_id:
            return ""
        return None

    def get_bucket_id(self, element: Any, now_ms: int) -> str:
        return ""

    @staticmethod
    def base_path_bucket_assigner() -> BucketAssigner:
        """Every record goes directly into the base path."""
        return BucketAssigner()

    @staticmethod
    def date_time_bucket_assigner(
        format_str: str = "%Y-%m-%d--%H", timezone_id: str | None = None
    ) -> BucketAssigner:
        """Buckets named by processing time with `format_str` (strftime directives) in
        `timezone_id` (an IANA name such as `UTC` or `Europe/Berlin`; None = local time)."""
        return DateTimeBucketAssigner(format_str, timezone_id)


class DateTimeBucketAssigner(BucketAssigner):
    """Buckets by processing time, hourly by default (Flink's `yyyy-MM-dd--HH`)."""

    def __init__(self, format_str: str = "%Y-%m-%d--%H", timezone_id: str | None = None) -> None:
        self.format_str = format_str
        self.timezone_id = timezone_id
        if "%" not in format_str and re.search("[A-Za-z]", format_str):
            raise ValueError(f"format_str takes strftime directives ('%Y-%m-%d'): {format_str!r}")
        self._tz = ZoneInfo(timezone_id) if timezone_id else None
        self._last: tuple[int, str] = (-1, "")  # one batch shares one timestamp

    def get_bucket_id(self, element: Any, now_ms: int) -> str:
        last = self._last
        if last[0] == now_ms:
            return last[1]
        bucket = datetime.fromtimestamp(now_ms / 1000, tz=self._tz).strftime(self.format_str)
        self._last = (now_ms, bucket)
        return bucket

    def batch_bucket_id(self, now_ms: int) -> str | None:
        if type(self).get_bucket_id is DateTimeBucketAssigner.get_bucket_id:
            return self.get_bucket_id(None, now_ms)  # depends on the time only
        return None


def open_binary(fs: AbstractFileSystem, path: str, mode: str) -> IO[bytes]:
    if isinstance(fs, LocalFileSystem):
        return open(path, mode)  # fewer layers than fsspec's LocalFileOpener
    return fs.open(path, mode)


def close_durably(stream: IO[bytes]) -> None:
    stream.flush()
    with contextlib.suppress(AttributeError, io.UnsupportedOperation):  # no OS file behind it
        os.fsync(stream.fileno())
    stream.close()


def _fsync_dir(fs: AbstractFileSystem, directory: str) -> None:
    """Make renames in a local directory durable (no-op elsewhere)."""
    if isinstance(fs, LocalFileSystem) and hasattr(os, "O_DIRECTORY"):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class FileSink:
    """Writes records into part files under `base_path`, exactly once, opening it with the
    job's `filesystems` options (set when the job is submitted): encoded by `encoder` (row
    format), or by a writer of `bulk_writer_factory` per part file (bulk format; `encoder` is
    then None and the rolling policy must be on-checkpoint)."""

    base_path: str
    encoder: Encoder | None
    output_file_config: OutputFileConfig = OutputFileConfig()
    bucket_assigner: BucketAssigner = field(default_factory=DateTimeBucketAssigner)
    rolling_policy: RollingPolicy = field(default_factory=RollingPolicy.default_rolling_policy)
    filesystems: FileSystems = NO_OPTIONS
    bulk_writer_factory: BulkWriterFactory | None = None

    def __post_init__(self) -> None:
        if (self.encoder is None) == (self.bulk_writer_factory is None):
            raise ValueError("a FileSink takes an Encoder (row format) or a BulkWriterFactory")
        if (
            self.bulk_writer_factory is not None
            and not self.rolling_policy.rolls_on_checkpoint_only
        ):
            raise ValueError(
                "bulk formats roll their part files on checkpoints only: use "
                f"RollingPolicy.on_checkpoint_rolling_policy(), got {self.rolling_policy}"
            )

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> RowFormatBuilder:
        return RowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: BulkWriterFactory) -> BulkFormatBuilder:
        """A sink writing part files with `writer_factory`'s writers (such as
        `ParquetBulkWriters.for_row_type(row_type)`), rolled at every checkpoint."""
        if not isinstance(writer_factory, BulkWriterFactory):
            raise TypeError(
                "FileSink.for_bulk_format takes a BulkWriterFactory (e.g. "
                f"ParquetBulkWriters.for_row_type(row_type)), got {writer_factory!r}"
            )
        return BulkFormatBuilder(base_path, writer_factory)

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> FileSinkWriter:
        return FileSinkWriter(self, subtask_index, attempt)

    def for_input_type(self, type_info: TypeInformation | None) -> FileSink:
        """This sink for a stream of the declared `type_info`: its encoder's choice
        (`Encoder.for_type`: the simple string encoder writes Flink's `toString` of the type);
        a bulk format's writers read each record by their own row type, whatever the stream's."""
        if self.encoder is None:
            return self
        return replace(self, encoder=self.encoder.for_type(type_info))

    def create_committer(self) -> FileSinkCommitter:
        return FileSinkCommitter(self.base_path, self.filesystems)

    def with_filesystems(self, filesystems: FileSystems) -> FileSink:
        """This sink writing with the job's filesystem options (connectors/base.py)."""
        return replace(self, filesystems=filesystems)

    def with_output_path(self, path: str) -> FileSink:
        """This sink writing under `path` instead of its base path (connectors/base.py
        `RedirectableSink`; lines are records only for a row format)."""
        return replace(self, base_path=path)

    def shared_paths(self) -> tuple[str, ...]:
        """The base path: writers and committers on every host write under it, and the
        output is the files whose names do not start with '.' (connectors/base.py)."""
        return (self.base_path,)

    def in_progress_pattern(self, subtask_index: int | None = None) -> re.Pattern[str]:
        """Matches the names of in-progress files of one subtask index (None: of any), any
        attempt; groups `subtask` and `attempt`."""
        prefix, suffix = map(re.escape, astuple(self.output_file_config))
        index = r"\d+" if subtask_index is None else str(subtask_index)
        return re.compile(
            rf"\.{prefix}-(?P<subtask>{index})-(?P<attempt>\d+)-\d+{suffix}\.inprogress"
        )

    def recover(
        self, subtask_index: int, parallelism: int, attempt: int, restored: list[Any]
    ) -> None:
        """Step 5: delete the in-progress files of attempts before `attempt` that are not in
        `restored` (the runtime commits those right after this call), of the writer indexes
        this subtask takes over: `k` with `writer_subtask(k, parallelism) == subtask_index`.

        The runtime hands the restored committables written by index `k` to that same subtask
        (`Sink`), so no other subtask deletes or renames these files meanwhile; after a
        scale-down, the leftovers of the indexes that no longer exist are cleaned up too.
        """
        fs, base = self.filesystems.resolve(self.base_path)
        if not fs.isdir(base):
            return
        keep = {posixpath.normpath(c.in_progress_path) for c in restored}
        pattern = self.in_progress_pattern()
        for path in fs.find(base):
            match = pattern.fullmatch(posixpath.basename(path))
            if (
                match
                and writer_subtask(int(match["subtask"]), parallelism) == subtask_index
                and int(match["attempt"]) < attempt
                and posixpath.normpath(path) not in keep
            ):
                fs.rm_file(path)


class BaseBuilder:
    """PyFlink's `FileSink.BaseBuilder`: what both formats' builders set."""

    def __init__(self, sink: FileSink) -> None:
        self._sink = sink

    def _with(self, **changes: Any) -> Any:
        self._sink = replace(self._sink, **changes)
        return self

    def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> Any:
        return self._with(bucket_assigner=bucket_assigner)

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> Any:
        return self._with(output_file_config=output_file_config)

    def with_bucket_check_interval(self, interval: int) -> Any:
        """Accepted for PyFlink compatibility: time-based rolling is checked on every batch."""
        return self

    def build(self) -> FileSink:
        return self._sink


class RowFormatBuilder(BaseBuilder):
    """PyFlink's `FileSink.RowFormatBuilder`."""

    def __init__(self, base_path: str, encoder: Encoder) -> None:
        super().__init__(FileSink(str(base_path), encoder))

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> RowFormatBuilder:
        return self._with(rolling_policy=rolling_policy)


class BulkFormatBuilder(BaseBuilder):
    """PyFlink's `FileSink.BulkFormatBuilder`: part files roll at every checkpoint."""

    def __init__(self, base_path: str, writer_factory: BulkWriterFactory) -> None:
        policy = RollingPolicy.on_checkpoint_rolling_policy()
        super().__init__(
            FileSink(
                str(base_path), None, rolling_policy=policy, bulk_writer_factory=writer_factory
            )
        )

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> BulkFormatBuilder:
        """Only `RollingPolicy.on_checkpoint_rolling_policy()` (as in PyFlink)."""
        if not rolling_policy.rolls_on_checkpoint_only:
            raise ValueError(
                "rolling_policy must be RollingPolicy.on_checkpoint_rolling_policy() for a bulk "
                f"format, got {rolling_policy}"
            )
        return self


@dataclass(slots=True)
class _PartFile:
    committable: FileSinkCommittable
    stream: IO[bytes]
    created_ms: int
    last_write_ms: int
    size: int = 0
    bulk_writer: BulkWriter | None = None  # a bulk format's writer of this file


class FileSinkWriter:
    """Steps 1-3 of the protocol for one sink subtask. `clock` returns seconds (tests inject it)."""

    def __init__(
        self,
        sink: FileSink,
        subtask_index: int,
        attempt: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sink = sink
        self._fs, self._base = sink.filesystems.resolve(sink.base_path)
        self._subtask = subtask_index
        self._attempt = attempt
        self._clock = clock
        self._open: dict[str, _PartFile] = {}
        self._pending: list[FileSinkCommittable] = []
        self._counter = 0
        self._dirs: set[str] = set()

    def write_batch(self, records: list[Any]) -> None:
        now_ms = int(self._clock() * 1000)
        policy = self._sink.rolling_policy
        if self._open and policy.has_time_limits:  # Step 2: roll by age / inactivity
            for bucket, part in list(self._open.items()):
                age, idle = now_ms - part.created_ms, now_ms - part.last_write_ms
                if policy.should_roll_on_processing_time(age, idle):
                    self._roll(bucket)
        if not records:
            return
        if self._sink.bulk_writer_factory is not None:
            self._write_bulk(records, now_ms)
            return
        bucket = self._sink.bucket_assigner.batch_bucket_id(now_ms)
        if bucket is not None:  # Step 1, fast: one bucket for the batch, encoded in one go
            part = self._open.get(bucket)
            data = self._sink.encoder.encode_batch(records)
            # the per-record size check below could not roll inside this batch
            fits = not policy.should_roll_on_event((part.size if part else 0) + len(data))
            if fits:
                if part is None:
                    part = self._open_part(bucket, now_ms)
                part.stream.write(data)
                part.size += len(data)
                part.last_write_ms = now_ms
                return
        assign = self._sink.bucket_assigner.get_bucket_id
        encode = self._sink.encoder.encode
        for record in records:  # Step 1: write into the bucket's open in-progress file
            bucket = assign(record, now_ms)
            data = encode(record)
            part = self._open.get(bucket)
            if part is not None and policy.should_roll_on_event(part.size):
                self._roll(bucket)  # Step 2: roll by size
                part = None
            if part is None:
                part = self._open_part(bucket, now_ms)
            part.stream.write(data)
            part.size += len(data)
            part.last_write_ms = now_ms

    def _write_bulk(self, records: list[Any], now_ms: int) -> None:
        """Step 1 for a bulk format: each bucket's records go to its file's writer in one call."""
        bucket = self._sink.bucket_assigner.batch_bucket_id(now_ms)
        if bucket is not None:
            groups = {bucket: records}
        else:
            assign = self._sink.bucket_assigner.get_bucket_id
            groups = {}
            for record in records:
                groups.setdefault(assign(record, now_ms), []).append(record)
        for bucket, group in groups.items():
            part = self._open.get(bucket) or self._open_part(bucket, now_ms)
            part.bulk_writer.add_elements(group)  # type: ignore[union-attr]
            part.last_write_ms = now_ms

    def prepare_commit(self, checkpoint_id: int) -> list[FileSinkCommittable]:
        """Step 3: close every open part file durably; hand over all pending committables."""
        for bucket in list(self._open):
            self._roll(bucket)
        committables, self._pending = self._pending, []
        return committables

    def close(self) -> None:
        """Close open part files without committing them (a restore decides their fate)."""
        for part in self._open.values():
            if part.bulk_writer is not None:
                part.bulk_writer.abort()
            part.stream.close()
        self._open.clear()

    def _bucket_dir(self, bucket: str) -> str:
        if bucket.startswith("/") or ".." in bucket.split("/"):
            raise ValueError(f"bucket id must be a relative path without '..': {bucket!r}")
        return posixpath.join(self._base, bucket) if bucket else self._base

    def _open_part(self, bucket: str, now_ms: int) -> _PartFile:
        directory = self._bucket_dir(bucket)
        if directory not in self._dirs:
            self._fs.makedirs(directory, exist_ok=True)
            self._dirs.add(directory)
        cfg = self._sink.output_file_config
        stem = f"{cfg.part_prefix}-{self._subtask}-{self._attempt}-"
        while True:  # skip names taken by an earlier run (e.g. a new job from a savepoint)
            name = f"{stem}{self._counter}{cfg.part_suffix}"
            self._counter += 1
            final = posixpath.join(directory, name)
            in_progress = posixpath.join(directory, f".{name}.inprogress")
            if not (self._fs.exists(final) or self._fs.exists(in_progress)):
                break
        stream = open_binary(self._fs, in_progress, "wb")
        committable = FileSinkCommittable(in_progress, final)
        part = self._open[bucket] = _PartFile(committable, stream, now_ms, now_ms)
        if self._sink.bulk_writer_factory is not None:
            part.bulk_writer = self._sink.bulk_writer_factory.create(stream)
        return part

    def _roll(self, bucket: str) -> None:
        part = self._open.pop(bucket)
        if part.bulk_writer is not None:
            part.bulk_writer.finish()
        close_durably(part.stream)
        self._pending.append(part.committable)


class FileSinkCommitter:
    """Step 4: rename pending in-progress files to their final names, idempotently."""

    def __init__(self, base_path: str, filesystems: FileSystems = NO_OPTIONS) -> None:
        self.base_path = base_path  # names the filesystem that committables' paths are on
        self.filesystems = filesystems

    def commit(self, committables: list[FileSinkCommittable]) -> None:
        if not committables:
            return
        fs, _ = self.filesystems.resolve(self.base_path)
        renamed_in: set[str] = set()
        for c in committables:
            match commit_action(fs.exists(c.in_progress_path), fs.exists(c.final_path)):
                case CommitAction.RENAME:
                    if isinstance(fs, LocalFileSystem):
                        os.replace(c.in_progress_path, c.final_path)  # atomic
                    else:
                        fs.mv(c.in_progress_path, c.final_path)
                    renamed_in.add(posixpath.dirname(c.final_path))
                case CommitAction.ALREADY_COMMITTED:
                    pass
                case CommitAction.LOST:
                    raise FileNotFoundError(
                        f"cannot commit {c.final_path}: neither it nor its in-progress file "
                        f"{c.in_progress_path} exists; the pre-committed records are lost"
                    )
        for directory in renamed_in:
            _fsync_dir(fs, directory)

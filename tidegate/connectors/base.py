"""Contracts between the runtime and connectors (sources and sinks).

Sources follow a small FLIP-27 shape: the job plans *splits* once, splits are handed to readers,
and a reader's progress is the set of splits it holds with their positions. Splits live in
operator list state, so they are checkpointed, restored exactly, and redistributed on rescale.

Sinks follow Flink's two-phase-commit Sink V2 shape: a writer pre-commits at each checkpoint
(returning *committables*), and a committer makes them visible only when the checkpoint is
complete.

Optional extensions of the source contract (the message-system sources use them): a reader's
batch may carry its records' timestamps (`TimestampedRecords`); a reader may say which split
each record came from (`SplitRecords`, `SplitReportingReader`: watermarks per split); a reader
may be told each completed checkpoint with its splits (`CheckpointListeningReader`); a
`SplitAssigningSource` chooses which splits each reader takes out of all of them, which lets
readers discover new splits on their own.

Two optional contracts concern connectors that read or write files: `UsesFileSystems` (the
job's filesystem options reach them on every host) and `SharedPathSink` (the paths every host
must see as one storage, which each attempt checks). A sink that names its idempotent writes
is told the job run's id (`UsesJobId`) and its operator's uid (`UsesOperatorUid`). A sink whose
output is the files under one directory can be moved elsewhere (`RedirectableSink`: `tidegate
chaos` runs a job twice, each run writing to a directory of its own).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from typing import Any, Protocol, runtime_checkable

from tidegate.common.filesystems import FileSystems


class Boundedness(enum.Enum):
    BOUNDED = "bounded"
    CONTINUOUS_UNBOUNDED = "continuous_unbounded"


class TimestampedRecords(list):
    """A batch a reader returns when its records have timestamps of their own (Kafka record
    timestamps): a list of values with a parallel `timestamps` list (ms since the epoch). The
    source operator hands them on as the records' timestamps (a WatermarkStrategy's timestamp
    assigner receives them as `record_timestamp`). A source whose readers do this sets the
    class attribute `attaches_timestamps = True`: `from_source` then accepts a
    WatermarkStrategy without a timestamp assigner (it uses these timestamps)."""

    __slots__ = ("timestamps",)

    def __init__(self, values: list[Any], timestamps: list[int]) -> None:
        super().__init__(values)
        self.timestamps = timestamps


class SplitRecords(list):
    """A batch of a reader that reports its splits (`SplitReportingReader`): a list of values,
    `timestamps` (a parallel list of ms since the epoch, as in TimestampedRecords, or None when
    the records have no timestamps of their own), and `split_runs`: `(split id, end)` pairs in
    order, saying that the records from the previous pair's end (0 for the first) up to `end`
    came from that split; the last `end` is the batch's length. A split id is any hashable
    value naming one split for the reader's lifetime (Kafka: `(topic, partition)`)."""

    __slots__ = ("split_runs", "timestamps")

    def __init__(
        self,
        values: list[Any],
        timestamps: list[int] | None,
        split_runs: list[tuple[Hashable, int]],
    ) -> None:
        super().__init__(values)
        self.timestamps = timestamps
        self.split_runs = split_runs


@runtime_checkable
class SplitListener(Protocol):
    """What a `SplitReportingReader` tells about its splits (the source operator's per-split
    watermark generators, runtime/split_watermarks.py). Called on the loop thread."""

    def add_split(self, split_id: Hashable) -> None:
        """The reader started reading split `split_id` (it may have no records yet)."""
        ...

    def finish_split(self, split_id: Hashable) -> None:
        """Split `split_id` ended (e.g. reached its stopping offset): it will return no more
        records."""
        ...


@runtime_checkable
class SplitReportingReader(Protocol):
    """A reader that says which split each record came from, so that a WatermarkStrategy runs
    one watermark generator per split (as Flink's split-aware sources do): the subtask's
    watermark is the minimum over its splits that are not idle, whatever order the reader
    interleaves them in. Its non-empty batches are `SplitRecords`."""

    def report_splits(self, listener: SplitListener) -> None:
        """Called once on the loop thread before the first `poll_batch`, when the source has a
        WatermarkStrategy that generates watermarks. The reader calls `listener.add_split` at
        once for each unfinished split it holds, then (from `poll_batch`) for each split it
        adds, and `listener.finish_split` for each split that ends."""
        ...


class SourceReader(Protocol):
    """Reads the splits of one source subtask. All methods run on the subtask's loop thread."""

    def poll_batch(self, max_records: int) -> list[Any] | None:
        """Return up to `max_records` records.

        An empty list means "nothing right now" (an unbounded source waiting for data or held
        back by a rate limit); `None` means every split is exhausted and the reader is finished.
        Must not block for long (at most ~50 ms), so checkpoints are not delayed.
        """
        ...

    def snapshot_splits(self) -> list[Any]:
        """The reader's splits with their current positions (picklable, immutable values).

        Called in the synchronous phase of a checkpoint, between two batches: restoring a reader
        from this list must resume exactly after the last record returned by `poll_batch`.
        """
        ...

    def close(self) -> None: ...


@runtime_checkable
class CheckpointListeningReader(Protocol):
    """A reader that tells its upstream system how far it got once a checkpoint completed
    (consumer-group acknowledgements, committed offsets): for monitoring and cleanup only,
    never for its exactly-once position, which is always the checkpointed splits."""

    def notify_checkpoint_complete(self, checkpoint_id: int, splits: list[Any]) -> None:
        """Called on the loop thread when checkpoint `checkpoint_id` completed, with the
        splits `snapshot_splits` returned for it. Not called for checkpoints that were
        subsumed by a later completed one, nor after a failure: after a restore the reader
        starts from the restored splits and gets notified for the new attempt's checkpoints."""
        ...


@runtime_checkable
class Source(Protocol):
    boundedness: Boundedness

    def create_splits(self, parallelism: int) -> list[Any]:
        """Plan the initial splits (deterministically) for a first run without restored state."""
        ...

    def create_reader(
        self, splits: list[Any], subtask_index: int, parallelism: int
    ) -> SourceReader:
        """Create a reader over `splits` (fresh from `create_splits` or restored from state)."""
        ...


@runtime_checkable
class SplitAssigningSource(Protocol):
    """A source whose readers pick their splits from all of them, by a rule of the source.

    Its splits are kept in union list state: after a restore (any parallelism) every reader
    sees every subtask's splits, keeps those the rule gives it, and knows which splits exist,
    so it may add splits it discovers later (new Kafka partitions) without another reader
    taking the same one: the rule must give every split to exactly one subtask. A reader must
    keep finished splits in `snapshot_splits` for the same reason."""

    def create_reader_for(
        self, all_splits: list[Any], subtask_index: int, parallelism: int
    ) -> SourceReader:
        """Create subtask `subtask_index`'s reader given every split (`create_splits` on a
        first run, all subtasks' restored splits after a restore)."""
        ...


class DataLossError(RuntimeError):
    """A source found that records after its checkpointed position were removed from the
    external system (a stream trimmed or aged out by its limits) before it read them. The
    message names the stream, the position and the first record still present; sources
    offer `set_fail_on_data_loss(False)` to continue from there instead (after a warning)."""


class SinkWriter(Protocol):
    """Writes records of one sink subtask. All methods run on the subtask's loop thread."""

    def write_batch(self, records: list[Any]) -> None: ...

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """Pre-commit (phase 1): make everything written so far durable but not yet visible.

        Called in the synchronous phase of checkpoint `checkpoint_id`. Returns the committables
        (picklable values) that the committer will later commit; the runtime stores them in the
        checkpoint, so they survive a failure.
        """
        ...

    def close(self) -> None:
        """Release resources. Uncommitted data stays where it is: a restore decides its fate."""
        ...


class Committer(Protocol):
    """Created once per sink subtask and attempt. A committer holding a connection may also
    define `close()`, called when the sink operator closes."""

    def commit(self, committables: list[Any]) -> None:
        """Phase 2: make committables visible. Must be idempotent: a committable that was already
        committed (before a failure) is committed again without error and without duplicates."""
        ...


@runtime_checkable
class Sink(Protocol):
    """A two-phase-commit sink. After a restore with another parallelism (rescale), writer
    index `k` of the snapshot is taken over by new subtask `writer_subtask(k, parallelism)`:
    that subtask gets the restored committables `k` wrote, and it alone cleans up `k`'s
    leftovers. So the files of one old writer are touched by one new subtask only, and a
    scale-down leaves no writer index without an owner."""

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> SinkWriter:
        """`attempt` counts restarts of the job (0 on the first run); writers put it in the names
        of what they create so leftovers of earlier attempts can be told apart."""
        ...

    def create_committer(self) -> Committer: ...

    def recover(
        self, subtask_index: int, parallelism: int, attempt: int, restored: list[Any]
    ) -> None:
        """Called once per sink subtask before its writer is created, after a restore or on a
        first run (`restored` empty). `restored` are the committables of the restored
        checkpoint written by the writer indexes this subtask takes over (every index `k` with
        `writer_subtask(k, parallelism) == subtask_index`: its own index and, after a
        scale-down, indexes that no longer exist); the runtime commits them right after this
        call. Remove uncommitted leftovers of earlier attempts of those writer indexes that are
        not in `restored`, and nothing of any other index: other subtasks recover
        concurrently and may be committing their files."""
        ...


@runtime_checkable
class UsesJobId(Protocol):
    """A sink whose idempotent writes are named after the job that prepared them."""

    def for_job(self, job_id: str) -> Sink:
        """Called in each sink subtask before `recover` and `create_writer`, with the running
        job's id (the same in every attempt of one run; a new random id for each new run,
        also one restored from a checkpoint or savepoint, unless `pipeline.job-id` fixes it).
        Returns the sink to use in this subtask."""
        ...


@runtime_checkable
class UsesOperatorUid(Protocol):
    """A sink whose idempotent writes are named after its operator's uid, so several sinks of
    one job (writing to one table, say) tell their commits apart."""

    def for_uid(self, uid: str) -> Sink:
        """Called in each sink subtask before `for_job`, `recover` and `create_writer`, with
        the sink operator's uid: the one given with `.uid(...)`, else one generated from the
        job's graph (the same in every attempt and run of an unchanged job). Returns the sink
        to use in this subtask."""
        ...


@runtime_checkable
class TypedSink(Protocol):
    """A sink whose output depends on the declared type of the stream it is added to."""

    def for_input_type(self, type_info: Any) -> Sink:
        """Called once by `DataStream.sink_to`, before the job is built, with the stream's
        declared TypeInformation (None if undeclared or a union of different types); returns
        the sink to run (a new one: the sink given may be shared by several streams)."""
        ...


@runtime_checkable
class UsesFileSystems(Protocol):
    """A source or sink that opens paths or URLs through fsspec."""

    def with_filesystems(self, filesystems: FileSystems) -> Any:
        """Called once when the job is submitted, on the driver, with the job's filesystem
        options (the `s3.*` and `fs.<protocol>.<option>` configuration keys, as fsspec storage
        options by protocol). Returns the connector the job runs, which opens every path with
        `filesystems` (`resolve` or `open`): it is pickled into the job, so the options reach
        every host. May check its paths (that inputs exist) and raise an error naming them:
        the job is then not started."""
        ...


@runtime_checkable
class SharedPathSink(Protocol):
    """A sink whose writers and committers, running on the executors, write to paths that the
    driver and every host must see as one storage (a shared filesystem or object store)."""

    def shared_paths(self) -> tuple[str, ...]:
        """The directories (paths or URLs) this sink writes into, created if missing.

        Called on the driver at every attempt, before the slots start (after
        `with_filesystems`): the driver writes a hidden check file `.storage-check-<token>`
        into each (with the job's filesystem options) and deletes it when the next attempt
        starts and when the job ends. Every slot that hosts a subtask of this sink reads it
        before calling `recover` or `create_writer`; a slot that does not find it fails the job
        at once, without restarts (StorageNotSharedError naming its host and the path). So the
        sink and the readers of its output must ignore files whose names start with '.'."""
        ...


@runtime_checkable
class RedirectableSink(Protocol):
    """A sink whose whole output is files under one directory: those whose names (and whose
    directories' names below it) do not start with '.' are committed, one record per line."""

    def with_output_path(self, path: str) -> Sink:
        """This sink writing under `path` instead. Called on the driver before the job is built
        (by `tidegate chaos`, which compares the committed output of two runs of a job)."""
        ...


@runtime_checkable
class ChecksCheckpointing(Protocol):
    """A source or sink whose correctness depends on the checkpoint interval."""

    def check_checkpoint_interval(self, interval_ms: int | None) -> None:
        """Called on the driver when the job is submitted, with the periodic checkpoint
        interval (None: no periodic checkpoints, e.g. BATCH mode). Raises ValueError naming
        the setting to change when the interval cannot work with this connector; the job is
        then not started."""
        ...


def bind_filesystems(connector: Any, filesystems: FileSystems) -> Any:
    """The connector a job runs: `connector.with_filesystems(filesystems)` if it opens files,
    else the connector itself."""
    if isinstance(connector, UsesFileSystems):
        return connector.with_filesystems(filesystems)
    return connector


def writer_subtask(writer_index: int, parallelism: int) -> int:
    """The subtask that takes over the committables and leftovers of sink writer index
    `writer_index` at `parallelism` subtasks: the index itself while it exists, else
    `writer_index % parallelism` (a pure rule, so every subtask agrees without talking)."""
    if parallelism < 1 or writer_index < 0:
        raise ValueError(
            f"need writer_index >= 0 and parallelism >= 1: {writer_index}, {parallelism}"
        )
    return writer_index % parallelism

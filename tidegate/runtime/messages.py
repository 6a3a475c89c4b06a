"""Control messages between the driver (JobMaster, CheckpointCoordinator) and slots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.options import CheckpointOptions

SubtaskId = tuple[int, int]  # (vertex id, subtask index)


# slot -> driver
@dataclass(frozen=True, slots=True)
class SlotStartup:
    """One slot's start-up marks, wall-clock seconds (None: not reached yet; metrics/startup.py)."""

    task_started: float
    job_loaded: float
    #: when the worker process was created (Linux); older than the attempt in a reused worker
    process_started: float | None = None
    tasks_created: float | None = None


@dataclass(frozen=True)
class RegisterSlot:
    attempt: int
    slot: int
    pid: int
    #: the host as Spark names the slot's executor (placement compares it with preferred
    #: locations); the machine's name on the local runner
    host: str
    data_address: tuple[str, int]
    #: when the slot's task started and loaded the job (metrics/startup.py)
    startup: SlotStartup | None = None


@dataclass(frozen=True)
class AcknowledgeCheckpoint:
    attempt: int
    subtask: SubtaskId
    checkpoint_id: int
    #: operator uid -> handle (file name relative to the checkpoint dir, index, key-group range)
    state: dict[str, Any] = field(default_factory=dict)
    sync_ms: float = 0.0
    async_ms: float = 0.0
    #: from the first barrier of this checkpoint reaching the subtask to its snapshot (0 for
    #: sources and single-input subtasks that never wait)
    alignment_ms: float = 0.0
    #: from the trigger (the barrier's timestamp) to the first barrier reaching the subtask
    start_delay_ms: float = 0.0
    #: bytes of in-flight records persisted as channel state (unaligned checkpoints)
    channel_state_bytes: int = 0
    #: whether this subtask took the checkpoint unaligned (from the start or after a timeout)
    unaligned: bool = False


@dataclass(frozen=True)
class DeclineCheckpoint:
    attempt: int
    subtask: SubtaskId
    checkpoint_id: int
    reason: str


@dataclass(frozen=True)
class SourceFinished:
    attempt: int
    subtask: SubtaskId


@dataclass(frozen=True)
class SlotFinished:
    attempt: int
    slot: int


@dataclass(frozen=True)
class SlotFailed:
    attempt: int
    slot: int
    error: str
    traceback: str


@dataclass(frozen=True)
class SlotOutput:
    """Text a slot wrote to sys.stdout or sys.stderr (`print()`, `DataStream.print()`), sent as
    it is written; the driver assembles each writing thread's lines (runtime/output.py)."""

    attempt: int
    slot: int
    stream: str  # "stdout" or "stderr"
    writer: int  # the writing thread's ident: its fragments form lines on the driver
    text: str


@dataclass(frozen=True)
class SlotLog:
    """A `logging` record of a slot process, formatted there, re-emitted by the driver."""

    attempt: int
    slot: int
    subtask: str  # the logging thread's name: "<task name> (<subtask + 1>/<parallelism>)"
    logger: str
    level: int
    message: str
    exc_text: str | None = None


@dataclass(frozen=True, slots=True)
class SubtaskMetrics:
    """A subtask's counters since its slot started."""

    records_in: int
    records_out: int
    #: seconds blocked handing output downstream (its queue or connection was full)
    backpressured_s: float = 0.0
    #: seconds spent waiting for input
    idle_s: float = 0.0
    #: keyed-state files read on restore from task-local copies and from checkpoint storage
    restored_local_files: int = 0
    restored_remote_files: int = 0


@dataclass(frozen=True)
class SlotMetrics:
    attempt: int
    slot: int
    subtasks: dict[SubtaskId, SubtaskMetrics]
    #: the slot's monotonic clock when the counters were read (rates divide by its differences)
    sampled_s: float = 0.0
    #: when the slot had connected and created its subtasks (wall clock, metrics/startup.py)
    tasks_created: float | None = None


# driver -> slot
@dataclass(frozen=True)
class SlotAddresses:
    addresses: dict[int, tuple[str, int]]


@dataclass(frozen=True)
class TriggerCheckpoint:
    checkpoint_id: int
    timestamp_ms: int
    options: CheckpointOptions


@dataclass(frozen=True)
class NotifyCheckpointComplete:
    checkpoint_id: int


@dataclass(frozen=True)
class NotifyCheckpointAborted:
    checkpoint_id: int


@dataclass(frozen=True)
class DrainSources:
    """stop-with-savepoint --drain: every source ends its input now, as if it were bounded
    (its operators finish and EndOfData flows), which leads to the final snapshot."""


@dataclass(frozen=True)
class CancelSlot:
    reason: str

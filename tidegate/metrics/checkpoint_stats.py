"""Checkpoint statistics of one job, as Flink's `CheckpointStatsTracker` keeps them: every
checkpoint's progress and per-subtask timings, a history of the newest N, counts, a summary of
the completed ones, and the latest completed checkpoint, savepoint, failure and restore.

The JobMaster reports what happens (`report_*`, from its own thread, the coordinator's timer
thread and the REST threads); readers (the REST API, `tidegate run`'s status line) get
immutable snapshots, so nothing they hold changes under them. One lock guards the tracker.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.runtime.messages import AcknowledgeCheckpoint, SubtaskId
from tidegate.state.handles import StateHandle

#: checkpoints kept in the history unless configured (`web.checkpoints.history`, as in Flink)
DEFAULT_HISTORY_SIZE = 10
#: restores remembered for the restore history
MAX_RESTORES = 100


class CheckpointStatus(enum.Enum):
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class CheckpointKind(enum.Enum):
    """Flink's `checkpoint_type` values."""

    CHECKPOINT = "CHECKPOINT"
    UNALIGNED_CHECKPOINT = "UNALIGNED_CHECKPOINT"
    SAVEPOINT = "SAVEPOINT"
    #: the savepoint of a stop-with-savepoint (the job finishes after it)
    SYNC_SAVEPOINT = "SYNC_SAVEPOINT"

    @classmethod
    def of(cls, options: CheckpointOptions) -> CheckpointKind:
        if options.is_savepoint:
            return cls.SYNC_SAVEPOINT if options.is_final else cls.SAVEPOINT
        return cls.UNALIGNED_CHECKPOINT if options.unaligned else cls.CHECKPOINT

    @property
    def is_savepoint(self) -> bool:
        return self in (CheckpointKind.SAVEPOINT, CheckpointKind.SYNC_SAVEPOINT)


@dataclass(frozen=True, slots=True)
class SubtaskCheckpointStats:
    """One subtask's acknowledgement of one checkpoint (times in ms)."""

    subtask: SubtaskId
    ack_timestamp_ms: int
    #: from the trigger to the ack reaching the driver
    end_to_end_duration_ms: int
    sync_duration_ms: float
    async_duration_ms: float
    alignment_duration_ms: float
    start_delay_ms: float
    #: bytes of the operator state files it wrote
    state_size: int
    #: bytes of in-flight records it persisted (unaligned checkpoints)
    persisted_data: int
    unaligned: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.subtask[1],
            "status": "completed",
            "ack_timestamp": self.ack_timestamp_ms,
            "end_to_end_duration": self.end_to_end_duration_ms,
            "state_size": self.state_size,
            "persisted_data": self.persisted_data,
            "checkpoint": {
                "sync": round(self.sync_duration_ms, 3),
                "async": round(self.async_duration_ms, 3),
            },
            "alignment": {"duration": round(self.alignment_duration_ms, 3)},
            "start_delay": round(self.start_delay_ms, 3),
            "unaligned_checkpoint": self.unaligned,
        }


@dataclass(frozen=True, slots=True)
class CheckpointStats:
    """One checkpoint or savepoint, as of the last report about it. Immutable: every report
    replaces it with an updated copy."""

    checkpoint_id: int
    kind: CheckpointKind
    trigger_timestamp_ms: int
    #: subtasks that must acknowledge it
    num_subtasks: int
    status: CheckpointStatus = CheckpointStatus.IN_PROGRESS
    #: never mutated: a report builds a new dict
    subtasks: dict[SubtaskId, SubtaskCheckpointStats] = field(default_factory=dict)
    completion_timestamp_ms: int | None = None
    external_path: str | None = None
    failure_timestamp_ms: int | None = None
    failure_message: str | None = None

    @property
    def is_savepoint(self) -> bool:
        return self.kind.is_savepoint

    @property
    def unaligned(self) -> bool:
        """Taken unaligned: from the start, or by a subtask whose alignment timed out."""
        return self.kind is CheckpointKind.UNALIGNED_CHECKPOINT or any(
            s.unaligned for s in self.subtasks.values()
        )

    @property
    def num_acknowledged_subtasks(self) -> int:
        return len(self.subtasks)

    @property
    def state_size(self) -> int:
        return sum(s.state_size for s in self.subtasks.values())

    @property
    def persisted_data(self) -> int:
        return sum(s.persisted_data for s in self.subtasks.values())

    @property
    def latest_ack_timestamp_ms(self) -> int | None:
        return max((s.ack_timestamp_ms for s in self.subtasks.values()), default=None)

    def end_to_end_duration_ms(self, now_ms: int) -> int:
        """Trigger to completion, to failure, or (in progress) to now."""
        end = self.completion_timestamp_ms or self.failure_timestamp_ms or now_ms
        return max(end - self.trigger_timestamp_ms, 0)

    def to_json(self, now_ms: int) -> dict[str, Any]:
        """The history entry (Flink's field names)."""
        return {
            "id": self.checkpoint_id,
            "status": self.status.value,
            "is_savepoint": self.is_savepoint,
            "checkpoint_type": self.kind.value,
            "unaligned": self.unaligned,
            "trigger_timestamp": self.trigger_timestamp_ms,
            "latest_ack_timestamp": self.latest_ack_timestamp_ms,
            "completion_timestamp": self.completion_timestamp_ms,
            "end_to_end_duration": self.end_to_end_duration_ms(now_ms),
            "state_size": self.state_size,
            "persisted_data": self.persisted_data,
            "num_subtasks": self.num_subtasks,
            "num_acknowledged_subtasks": self.num_acknowledged_subtasks,
            "external_path": self.external_path,
            "failure_timestamp": self.failure_timestamp_ms,
            "failure_message": self.failure_message,
        }


@dataclass(frozen=True, slots=True)
class RestoreStats:
    """A restore of the job from a checkpoint or savepoint (at start or after a failure)."""

    checkpoint_id: int
    external_path: str
    is_savepoint: bool
    restore_timestamp_ms: int
    #: the job attempt that restored it (0: the job's first deployment)
    attempt: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.checkpoint_id,
            "restore_timestamp": self.restore_timestamp_ms,
            "is_savepoint": self.is_savepoint,
            "external_path": self.external_path,
            "attempt": self.attempt,
        }


@dataclass(slots=True)
class MinMaxAvg:
    """Running min, max and average of a statistic (Flink's `StatsSummary`)."""

    count: int = 0
    total: float = 0
    min: float | None = None
    max: float | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)

    @property
    def avg(self) -> float | None:
        return self.total / self.count if self.count else None

    def to_json(self) -> dict[str, Any]:
        return {name: _rounded(getattr(self, name)) for name in ("min", "max", "avg")}

    @classmethod
    def of(cls, values: Iterable[float]) -> MinMaxAvg:
        summary = cls()
        for v in values:
            summary.add(v)
        return summary


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True, slots=True)
class CheckpointCounts:
    restored: int = 0
    total: int = 0
    in_progress: int = 0
    completed: int = 0
    failed: int = 0

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _now_ms() -> int:
    return int(time.time() * 1000)


def state_size_of(state: dict[str, Any]) -> int:
    """Bytes of the state files named by an ack's handles (channel state is counted as
    persisted in-flight data instead)."""
    return sum(h.index.size for h in state.values() if isinstance(h, StateHandle) and h.index)


class CheckpointStatsTracker:
    """Statistics of one job's checkpoints across all its attempts. Thread-safe."""

    def __init__(self, history_size: int = DEFAULT_HISTORY_SIZE) -> None:
        if history_size < 1:
            raise ValueError(f"the checkpoint history size must be >= 1, got {history_size}")
        self.history_size = history_size
        self._lock = threading.Lock()
        self._history: OrderedDict[int, CheckpointStats] = OrderedDict()
        self._in_progress: set[int] = set()
        self._counts = CheckpointCounts()
        self._durations = MinMaxAvg()
        self._state_sizes = MinMaxAvg()
        self._persisted = MinMaxAvg()
        self._latest_completed: CheckpointStats | None = None
        self._latest_completed_checkpoint: CompletedCheckpoint | None = None
        self._latest_savepoint: CheckpointStats | None = None
        self._latest_failed: CheckpointStats | None = None
        self._restores: deque[RestoreStats] = deque(maxlen=MAX_RESTORES)

    # reports ---------------------------------------------------------------------------------
    def report_triggered(
        self, checkpoint_id: int, timestamp_ms: int, options: CheckpointOptions, num_subtasks: int
    ) -> None:
        stats = CheckpointStats(
            checkpoint_id, CheckpointKind.of(options), timestamp_ms, num_subtasks
        )
        with self._lock:
            self._in_progress.add(checkpoint_id)
            self._counts = dataclasses.replace(
                self._counts, total=self._counts.total + 1, in_progress=len(self._in_progress)
            )
            self._history[checkpoint_id] = stats
            while len(self._history) > self.history_size:
                self._history.popitem(last=False)

    def report_ack(self, ack: AcknowledgeCheckpoint, now_ms: int | None = None) -> None:
        """A subtask acknowledged; acks of checkpoints no longer in progress are ignored."""
        now_ms = _now_ms() if now_ms is None else now_ms
        with self._lock:
            stats = self._history.get(ack.checkpoint_id)
            if stats is None or stats.status is not CheckpointStatus.IN_PROGRESS:
                return
            subtask = SubtaskCheckpointStats(
                subtask=tuple(ack.subtask),
                ack_timestamp_ms=now_ms,
                end_to_end_duration_ms=max(now_ms - stats.trigger_timestamp_ms, 0),
                sync_duration_ms=ack.sync_ms,
                async_duration_ms=ack.async_ms,
                alignment_duration_ms=ack.alignment_ms,
                start_delay_ms=ack.start_delay_ms,
                state_size=state_size_of(ack.state),
                persisted_data=ack.channel_state_bytes,
                unaligned=ack.unaligned,
            )
            subtasks = {**stats.subtasks, subtask.subtask: subtask}
            self._history[ack.checkpoint_id] = dataclasses.replace(stats, subtasks=subtasks)

    def report_completed(self, cp: CompletedCheckpoint) -> None:
        with self._lock:
            stats = self._history.get(cp.checkpoint_id)
            if stats is None:  # evicted from the history while in progress
                kind = CheckpointKind.SAVEPOINT if cp.is_savepoint else CheckpointKind.CHECKPOINT
                stats = CheckpointStats(cp.checkpoint_id, kind, cp.timestamp_ms, 0)
            stats = dataclasses.replace(
                stats,
                status=CheckpointStatus.COMPLETED,
                completion_timestamp_ms=cp.completed_ms,
                external_path=cp.path,
            )
            if cp.checkpoint_id in self._history:
                self._history[cp.checkpoint_id] = stats
            self._in_progress.discard(cp.checkpoint_id)
            self._counts = dataclasses.replace(
                self._counts,
                completed=self._counts.completed + 1,
                in_progress=len(self._in_progress),
            )
            self._durations.add(stats.end_to_end_duration_ms(cp.completed_ms))
            self._state_sizes.add(stats.state_size)
            self._persisted.add(stats.persisted_data)
            self._latest_completed = stats
            self._latest_completed_checkpoint = cp
            if stats.is_savepoint:
                self._latest_savepoint = stats

    def report_failed(self, checkpoint_id: int, reason: str, now_ms: int | None = None) -> None:
        """The checkpoint was aborted (declined, expired, subsumed, or its attempt ended)."""
        now_ms = _now_ms() if now_ms is None else now_ms
        with self._lock:
            if checkpoint_id not in self._in_progress:
                return
            self._in_progress.discard(checkpoint_id)
            self._counts = dataclasses.replace(
                self._counts, failed=self._counts.failed + 1, in_progress=len(self._in_progress)
            )
            stats = self._history.get(checkpoint_id)
            if stats is None:
                return
            stats = dataclasses.replace(
                stats,
                status=CheckpointStatus.FAILED,
                failure_timestamp_ms=now_ms,
                failure_message=reason,
            )
            self._history[checkpoint_id] = stats
            self._latest_failed = stats

    def report_restored(
        self,
        checkpoint_id: int,
        path: str,
        *,
        is_savepoint: bool,
        attempt: int,
        now_ms: int | None = None,
    ) -> None:
        restore = RestoreStats(
            checkpoint_id, path, is_savepoint, _now_ms() if now_ms is None else now_ms, attempt
        )
        with self._lock:
            self._restores.append(restore)
            self._counts = dataclasses.replace(self._counts, restored=self._counts.restored + 1)

    # reads -----------------------------------------------------------------------------------
    @property
    def counts(self) -> CheckpointCounts:
        return self._counts

    def history(self) -> list[CheckpointStats]:
        """The newest checkpoints, oldest first."""
        with self._lock:
            return list(self._history.values())

    def checkpoint(self, checkpoint_id: int) -> CheckpointStats | None:
        """A checkpoint still in the history, or None."""
        with self._lock:
            return self._history.get(checkpoint_id)

    @property
    def latest_completed(self) -> CompletedCheckpoint | None:
        """The latest completed checkpoint or savepoint (with its `_metadata`)."""
        return self._latest_completed_checkpoint

    @property
    def latest_restored(self) -> RestoreStats | None:
        with self._lock:
            return self._restores[-1] if self._restores else None

    def restores(self) -> list[RestoreStats]:
        """Every restore (the newest MAX_RESTORES), oldest first."""
        with self._lock:
            return list(self._restores)

    def to_json(self, now_ms: int | None = None) -> dict[str, Any]:
        """Counts, summary, latest and history (Flink's `/jobs/:id/checkpoints` shape)."""
        now_ms = _now_ms() if now_ms is None else now_ms
        with self._lock:
            history = list(self._history.values())
            latest = (self._latest_completed, self._latest_savepoint, self._latest_failed)
            restored = self._restores[-1] if self._restores else None
            summary = {
                "end_to_end_duration": self._durations.to_json(),
                "state_size": self._state_sizes.to_json(),
                "persisted_data": self._persisted.to_json(),
            }
            counts = self._counts
        completed, savepoint, failed = (None if s is None else s.to_json(now_ms) for s in latest)
        return {
            "counts": counts.to_json(),
            "summary": summary,
            "latest": {
                "completed": completed,
                "savepoint": savepoint,
                "failed": failed,
                "restored": None if restored is None else restored.to_json(),
            },
            "history": [s.to_json(now_ms) for s in reversed(history)],
        }


def details_json(
    stats: CheckpointStats, vertices: dict[int, tuple[str, int]], now_ms: int | None = None
) -> dict[str, Any]:
    """One checkpoint with its per-vertex and per-subtask statistics. `vertices` maps vertex
    id -> (name, parallelism) for the job's graph."""
    now_ms = _now_ms() if now_ms is None else now_ms
    tasks = {}
    for vertex_id, (name, parallelism) in vertices.items():
        acked = sorted(
            (s for s in stats.subtasks.values() if s.subtask[0] == vertex_id),
            key=lambda s: s.subtask[1],
        )
        by_index = {s.subtask[1]: s for s in acked}
        subtasks = [
            by_index[i].to_json() if i in by_index else {"index": i, "status": "pending_or_failed"}
            for i in range(parallelism)
        ]
        tasks[str(vertex_id)] = {
            "id": vertex_id,
            "name": name,
            "status": stats.status.value,
            "latest_ack_timestamp": max((s.ack_timestamp_ms for s in acked), default=None),
            "state_size": sum(s.state_size for s in acked),
            "persisted_data": sum(s.persisted_data for s in acked),
            "num_subtasks": parallelism,
            "num_acknowledged_subtasks": len(acked),
            "summary": _subtask_summary(acked),
            "subtasks": subtasks,
        }
    return {**stats.to_json(now_ms), "tasks": tasks}


def _subtask_summary(acked: list[SubtaskCheckpointStats]) -> dict[str, Any]:
    """Min/avg/max over a vertex's acknowledged subtasks."""
    fields = {
        "end_to_end_duration": lambda s: s.end_to_end_duration_ms,
        "state_size": lambda s: s.state_size,
        "persisted_data": lambda s: s.persisted_data,
        "sync_duration": lambda s: s.sync_duration_ms,
        "async_duration": lambda s: s.async_duration_ms,
        "alignment_duration": lambda s: s.alignment_duration_ms,
        "start_delay": lambda s: s.start_delay_ms,
    }
    return {name: MinMaxAvg.of(get(s) for s in acked).to_json() for name, get in fields.items()}

"""Everything the JobMaster needs to run a job: the graph and its settings (built by
`StreamExecutionEnvironment.execute`, or by the CLI)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.options import CheckpointOptions
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.deploy.python_deps import PythonDependencies
from tidegate.runtime.collector import DEFAULT_GC_THRESHOLD
from tidegate.runtime.faults import FaultPlan
from tidegate.runtime.plan import JobGraph
from tidegate.runtime.switch_interval import DEFAULT_SWITCH_INTERVAL_US


class CheckpointRetention(enum.Enum):
    """What happens to retained checkpoints when the job ends (Flink's externalized-checkpoint
    retention): all are deleted when a job FINISHES; on FAILED they stay unless
    NO_EXTERNALIZED_CHECKPOINTS; on CANCELED only RETAIN_ON_CANCELLATION keeps them."""

    NO_EXTERNALIZED_CHECKPOINTS = "NO_EXTERNALIZED_CHECKPOINTS"
    DELETE_ON_CANCELLATION = "DELETE_ON_CANCELLATION"
    RETAIN_ON_CANCELLATION = "RETAIN_ON_CANCELLATION"


class RestoreMode(enum.Enum):
    """Who owns the snapshot a job is started from (Flink's `RestoreMode`/`RecoveryClaimMode`).

    NO_CLAIM: the snapshot stays the user's; the new job never modifies or deletes it.
    CLAIM: the new job owns the snapshot like one of its own checkpoints: it is subsumed and
    deleted by the job's retention as the job's own checkpoints complete.
    """

    NO_CLAIM = "NO_CLAIM"
    CLAIM = "CLAIM"

    @classmethod
    def parse(cls, value: str | RestoreMode) -> RestoreMode:
        if isinstance(value, RestoreMode):
            return value
        try:
            return cls(str(value).strip().upper().replace("-", "_"))
        except ValueError:
            raise ValueError(
                f"unknown restore (claim) mode {value!r}: use NO_CLAIM (the default) or CLAIM"
            ) from None


@dataclass(frozen=True)
class CheckpointSettings:
    interval_ms: int | None = None
    exactly_once: bool = True
    timeout_ms: int = 600_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    max_retained: int = 1
    storage: str | None = None
    retention: CheckpointRetention = CheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS
    unaligned: bool = False
    #: with `unaligned`: start aligned and switch after this many ms of alignment (0: never
    #: aligned)
    aligned_timeout_ms: int = 0
    #: where savepoints go when none is given when one is triggered (None: must be given)
    savepoint_dir: str | None = None
    #: `storage` is the default temp directory (none was configured): refused on a cluster
    storage_defaulted: bool = False

    def validate(self) -> CheckpointSettings:
        """Raise ValueError for settings that contradict each other (checked when the job is
        built, so the setters can be called in any order)."""
        if self.unaligned and not self.exactly_once:
            raise ValueError(
                "unaligned checkpoints need CheckpointingMode.EXACTLY_ONCE (at-least-once "
                "checkpoints never block, so they have nothing to unalign); disable one of them"
            )
        if self.unaligned and self.max_concurrent > 1:
            raise ValueError(
                "unaligned checkpoints run one at a time: set max concurrent checkpoints to 1 "
                f"(it is {self.max_concurrent}) or disable unaligned checkpoints"
            )
        return self

    @property
    def options(self) -> CheckpointOptions:
        """The options of this job's periodic and final checkpoints."""
        if not self.unaligned:
            return CheckpointOptions()
        if self.aligned_timeout_ms > 0:
            return CheckpointOptions(aligned_timeout_ms=self.aligned_timeout_ms)
        return CheckpointOptions(unaligned=True)


@dataclass(frozen=True)
class JobSpec:
    job_name: str
    graph: JobGraph
    checkpoint: CheckpointSettings
    restart_strategy: Any
    runner: str = "spark"
    spark_master: str | None = None
    bind_host: str | None = None
    #: the host slots dial to reach the driver when it binds to all interfaces
    advertised_host: str | None = None
    #: checkpoints kept in the statistics' history (`web.checkpoints.history`)
    checkpoint_history_size: int = 10
    #: the job's configuration keys, as given (shown by the REST API, secrets hidden; not in
    #: the repr, which would show them)
    configuration: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: fsspec storage options by protocol (`s3.*`, `fs.<protocol>.<option>` keys): for the
    #: checkpoint storage, savepoints and restores, on the driver and in every slot
    filesystems: FileSystems = NO_OPTIONS
    batch_size: int = 512
    buffer_timeout_ms: int = 10
    queue_capacity: int = 64
    #: `tidegate.python.gc-threshold` (runtime/collector.py)
    gc_threshold: int = DEFAULT_GC_THRESHOLD
    #: `tidegate.python.switch-interval-us` (runtime/switch_interval.py)
    switch_interval_us: int = DEFAULT_SWITCH_INTERVAL_US
    heartbeat_timeout_ms: int = 50_000
    #: a restore may skip damaged checkpoints and use an older one (restore fallback)
    restore_fallback: bool = False
    restore_path: str | None = None
    #: task-local recovery, and its root directory on every worker (None: each worker's
    #: system temp dir, resolved on the worker)
    local_recovery: bool = False
    local_recovery_dir: str | None = None
    #: drop the state of operators the job does not have instead of failing the restore
    allow_non_restored_state: bool = False
    restore_mode: RestoreMode = RestoreMode.NO_CLAIM
    job_id: str | None = None
    spark_session: Any = field(default=None, compare=False)
    #: HashMapStateBackend or EmbeddedRocksDBStateBackend (None: hashmap)
    state_backend: Any = None
    #: the job's Python files and requirements, shipped to every worker (None: nothing)
    python: PythonDependencies | None = field(default=None, compare=False)
    #: the faults a `tidegate chaos` run injects (runtime/faults.py; None: none)
    faults: FaultPlan | None = None

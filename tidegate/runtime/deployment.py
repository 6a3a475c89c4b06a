"""What the JobMaster sends to every slot for one attempt of a job."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from tidegate.checkpoint.shared_storage import StorageCheck
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.runtime.collector import DEFAULT_GC_THRESHOLD
from tidegate.runtime.faults import FaultPlan
from tidegate.runtime.plan import JobGraph
from tidegate.runtime.switch_interval import DEFAULT_SWITCH_INTERVAL_US


@dataclass(frozen=True)
class Deployment:
    job_id: str
    attempt: int
    graph: JobGraph
    secret: bytes
    driver_address: tuple[str, int]
    bind_host: str
    checkpoint_base: str
    #: the job's filesystem options (checkpoint storage, restored state)
    filesystems: FileSystems = NO_OPTIONS
    exactly_once: bool = True
    batch_size: int = 512
    buffer_timeout_ms: int = 10
    queue_capacity: int = 64
    #: young-generation threshold of the slots' cyclic GC (runtime/collector.py; 0: Python's)
    gc_threshold: int = DEFAULT_GC_THRESHOLD
    #: the slots' GIL switch interval, microseconds (runtime/switch_interval.py; 0: Python's)
    switch_interval_us: int = DEFAULT_SWITCH_INTERVAL_US
    #: (vertex id, subtask) -> operator uid -> RestoredOperatorState; empty on a fresh start
    restore: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    #: checkpoint id this attempt was restored from (None on a fresh start)
    restored_checkpoint_id: int | None = None
    #: the attempt's writer generation: names its files; older generations are fenced off
    generation: int | None = None
    #: task-local recovery: copies of checkpoints on the workers' disks, under this root
    #: (None: the system temp dir of each worker, resolved there)
    local_recovery: bool = False
    local_recovery_dir: str | None = None
    #: creates keyed state backends on the workers (datastream.state_backend; None: hashmap)
    state_backend: Any = None
    #: the driver's root log level: slot `logging` records from this level up reach the driver
    log_level: int = logging.WARNING
    #: the check files the driver wrote for this attempt (checkpoint/shared_storage.py): each
    #: slot reads those of the directories it uses before it writes anything
    storage_checks: tuple[StorageCheck, ...] = ()
    #: a connection whose peer stays silent this long fails (runtime/connect.py): a slot cut
    #: off from its driver ends on its own; the job's heartbeat timeout
    heartbeat_timeout_s: float = 50.0
    #: the faults a `tidegate chaos` run injects (runtime/faults.py; None: none)
    faults: FaultPlan | None = None

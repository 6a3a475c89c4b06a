"""When each step of a job attempt's start-up happened, from the submission (or the failure
that ended the previous attempt) to the slots' subtasks created, for `JobStats.startup`, the
REST API's job detail and `bench/startup.py`.

Times are wall-clock seconds (`time.time()`): the slots' marks come from their own clocks, so
on a cluster they are only as comparable as the hosts' clocks are synchronised. The steps, in
order (each phase is the time from the previous step to this one; a slot step is the slowest
slot's):

- `started`: the JobMaster began the attempt (the job was submitted, or it restarts);
- `session_ready`: the Spark session is there (the JVM and SparkContext start, the first time
  in a process; ~0 when a running session is reused; the local runner has none);
- `stage_submitted`: the restore plan, the storage checks and the pickled deployment are ready
  and the runner is asked to start the slots (Spark: the barrier stage is submitted);
- `task_started`: the runner called the slot's entry (Spark scheduled the barrier tasks and
  forked or reused its Python workers; local: the zygote forked the slot process, or a fresh
  slot process started);
- `job_loaded`: the slot unpickled the deployment (the job's code imported);
- `running`: every slot registered with the driver (data listener open, control connection up)
  and the driver sent the address book: status RUNNING;
- `tasks_created`: the slot connected its output channels and created its subtasks, restoring
  their state; its sources start reading now.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from tidegate.runtime.messages import SlotStartup

#: the steps, in the order they happen
STEPS = (
    "started",
    "session_ready",
    "stage_submitted",
    "task_started",
    "job_loaded",
    "running",
    "tasks_created",
)
#: the steps each slot reports
SLOT_STEPS = ("task_started", "job_loaded", "tasks_created")


def process_start_time() -> float | None:
    """When this process was created (wall clock), from /proc; None where there is no /proc."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            stat = f.read()
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    ticks = int(stat[stat.rfind(")") + 2 :].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class AttemptStartup:
    attempt: int
    started: float
    #: when the failure that ended the previous attempt was handled (None: the first attempt)
    failed: float | None = None
    session_ready: float | None = None
    stage_submitted: float | None = None
    running: float | None = None
    slots: dict[int, SlotStartup] = field(default_factory=dict)

    def marks(self) -> dict[str, float | None]:
        """Every step's time; a slot step is the slowest slot's (None until all reported)."""
        out: dict[str, float | None] = {
            "started": self.started,
            "session_ready": self.session_ready,
            "stage_submitted": self.stage_submitted,
            "running": self.running,
        }
        for step in SLOT_STEPS:
            times = [getattr(s, step) for s in self.slots.values()]
            out[step] = max(times) if times and None not in times else None
        return {step: out[step] for step in STEPS}

    def phases(self) -> dict[str, float | None]:
        """Seconds from each step to the next (keyed by the later step), and `restart` (the
        failure to `started`: tearing down the failed attempt and the restart delay)."""
        marks = self.marks()
        out: dict[str, float | None] = {}
        if self.failed is not None:
            out["restart"] = self.started - self.failed
        previous = marks["started"]
        for step in STEPS[1:]:
            now = marks[step]
            out[step] = None if now is None or previous is None else now - previous
            previous = now if now is not None else previous
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "failed": self.failed,
            "marks": self.marks(),
            "phases": self.phases(),
            "slots": {
                str(slot): {
                    "process-started": s.process_started,
                    "task-started": s.task_started,
                    "job-loaded": s.job_loaded,
                    "tasks-created": s.tasks_created,
                }
                for slot, s in sorted(self.slots.items())
            },
        }


class StartupTimeline:
    """The start-up of every attempt of a job; marks come from the JobMaster's thread and the
    control server's reader threads, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: dict[int, AttemptStartup] = {}
        self._failed: float | None = None

    def attempt_started(self, attempt: int) -> None:
        with self._lock:
            self._attempts[attempt] = AttemptStartup(attempt, time.time(), self._failed)
            self._failed = None

    def attempt_failed(self) -> None:
        with self._lock:
            self._failed = time.time()

    def mark(self, attempt: int, step: str) -> None:
        """`step` ("session_ready", "stage_submitted", "running") happened now."""
        with self._lock:
            record = self._attempts.get(attempt)
            if record is not None and getattr(record, step) is None:
                setattr(record, step, time.time())

    def slot_registered(self, attempt: int, slot: int, startup: SlotStartup | None) -> None:
        with self._lock:
            record = self._attempts.get(attempt)
            if record is not None and startup is not None:
                record.slots[slot] = startup

    def slot_ready(self, attempt: int, slot: int, tasks_created: float | None) -> None:
        with self._lock:
            record = self._attempts.get(attempt)
            known = None if record is None else record.slots.get(slot)
            if known is not None and known.tasks_created is None and tasks_created is not None:
                record.slots[slot] = replace(known, tasks_created=tasks_created)

    def attempts(self) -> list[AttemptStartup]:
        with self._lock:
            return [replace(a, slots=dict(a.slots)) for _, a in sorted(self._attempts.items())]

    def to_json(self) -> list[dict[str, Any]]:
        return [a.to_json() for a in self.attempts()]

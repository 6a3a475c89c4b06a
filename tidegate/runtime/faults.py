"""Fault injection for `tidegate chaos` (cli/chaos.py): which faults a run gets, decided up
front by a seeded, pure plan (`plan_faults`), and the injector a slot installs to carry them
out at named sites of the runtime.

A fault is planned at a checkpoint id N, and happens at the first site it meets at checkpoint N
or a later one (a checkpoint triggered while an attempt fails may never reach a site). Each
happens at most once: a slot skips the faults the log already holds (below). The same seed
plans the same faults. The kinds:

- `exception`: a user function raises (`InjectedFault`), a random time after checkpoint N
  completed (the operators of user functions are wrapped when a chaos run builds the job:
  `FaultyOperatorFactory`);
- `kill`: the slot's Python process SIGKILLs itself, either while checkpoint N is in its
  asynchronous phase or a random time after N completed;
- `snapshot-sync` / `snapshot-async`: the synchronous or asynchronous snapshot phase of
  checkpoint N fails in one subtask (the checkpoint is declined);
- `commit`: a sink's commit of checkpoint N fails (`notify_checkpoint_complete`);
- `storage-write`: writing a state file of checkpoint N fails with an I/O error part-way
  (`FaultyCheckpointStorage`);
- `storage-hang`: writing a state file of checkpoint N blocks for longer than the checkpoint
  timeout (`duration_s`), so the checkpoint expires; the blocked write then fails without
  writing, and so does it at once when its slot ends (`close`): it never wedges a later attempt;
- `slow`: a user function's subtask stalls (sleeps `duration_s` before a batch) a random time
  after checkpoint N completed: backpressure builds and an aligned checkpoint waits, nothing
  fails (the job does not restart);
- `disconnect`: one of the slot's outgoing data connections to another slot is shut down a
  random time after checkpoint N completed (`SlotNetwork.drop_connection`, from a timer thread):
  the next send on it fails, and the job restarts;
- `metadata-write`: the driver's write of checkpoint N's `_metadata` fails, after every
  subtask acknowledged (every sink pre-committed) and before the checkpoint completed
  (`fail_metadata_write`, called by the JobMaster);
- `restore`: the first restore from checkpoint N or a later one fails while it reads keyed
  state (then the next attempt restores normally);
- `executor-loss`: a random time after checkpoint N completed, a slot SIGKILLs the executor JVM
  it runs under (the whole executor is lost; cluster masters only: `CLUSTER_KINDS`);
- `driver-restart`: the harness SIGKILLs the whole driver (`tidegate run`, its JVM and slots)
  once checkpoint N completed, and starts it again restoring the job directory's latest
  completed checkpoint under the same job id (cli/chaos.py; `due_driver_restart`).

The sites call `reach(site, checkpoint_id)` (and `restoring()`): with chaos off (`_active` is
None) a site costs one global lookup per checkpoint or restore, and no per-record code has a
hook. Every fault carried out is appended, as a JSON line written and fsynced before the fault
happens (a SIGKILL leaves no chance after), to the plan's log file, which the harness reads;
so is the moment each slot's subtasks run (restored) in each attempt (`subtasks_running`), from
which the harness measures recovery times. A slot skips the faults the log already holds, so a
fault happens once even when the restarted attempt would meet its site again (a restore).
"""

from __future__ import annotations

import enum
import errno
import json
import os
import posixpath
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.runtime.messages import NotifyCheckpointComplete


class FaultKind(enum.StrEnum):
    EXCEPTION = "exception"
    KILL = "kill"
    SNAPSHOT_SYNC = "snapshot-sync"
    SNAPSHOT_ASYNC = "snapshot-async"
    COMMIT = "commit"
    STORAGE_WRITE = "storage-write"
    STORAGE_HANG = "storage-hang"
    METADATA_WRITE = "metadata-write"
    RESTORE = "restore"
    SLOW = "slow"
    DISCONNECT = "disconnect"
    DRIVER_RESTART = "driver-restart"
    EXECUTOR_LOSS = "executor-loss"


class Site(enum.Enum):
    """Where the runtime calls `reach`."""

    SYNC_SNAPSHOT = "sync snapshot"
    ASYNC_SNAPSHOT = "async snapshot"
    COMMIT = "commit"


#: the kind of fault that makes each site fail
_FAILING_AT = {
    Site.SYNC_SNAPSHOT: FaultKind.SNAPSHOT_SYNC,
    Site.ASYNC_SNAPSHOT: FaultKind.SNAPSHOT_ASYNC,
    Site.COMMIT: FaultKind.COMMIT,
}


class InjectedFault(RuntimeError):
    """The failure `tidegate chaos` injected (its message says which and where)."""


#: when a fault not tied to a delay happens, by kind
_WHEN = {
    FaultKind.KILL: "in the asynchronous phase of checkpoint {}",
    FaultKind.SNAPSHOT_SYNC: "in the synchronous phase of checkpoint {}",
    FaultKind.SNAPSHOT_ASYNC: "in the asynchronous phase of checkpoint {}",
    FaultKind.COMMIT: "in the commit of checkpoint {}",
    FaultKind.STORAGE_WRITE: "writing a state file of checkpoint {}",
    FaultKind.STORAGE_HANG: "writing a state file of checkpoint {}",
    FaultKind.METADATA_WRITE: "writing the _metadata of checkpoint {}",
    FaultKind.RESTORE: "restoring keyed state from checkpoint {}",
    FaultKind.DRIVER_RESTART: "killed (SIGKILL) after checkpoint {} completed, started again",
}
#: the kinds that happen on the driver, not in a slot
DRIVER_KINDS = frozenset({FaultKind.METADATA_WRITE, FaultKind.DRIVER_RESTART})
#: the kinds that fail nothing by themselves (no restart follows them)
NON_FAILING_KINDS = frozenset({FaultKind.SLOW})
#: the kinds carried out a random time after their checkpoint completed
_DELAYED_KINDS = frozenset(
    {FaultKind.EXCEPTION, FaultKind.SLOW, FaultKind.DISCONNECT, FaultKind.EXECUTOR_LOSS}
)
#: the kinds that need executors of their own (JVMs apart from the driver's): a cluster master
CLUSTER_KINDS = frozenset({FaultKind.EXECUTOR_LOSS})
#: an executor JVM's command line (Spark's standalone, YARN and Kubernetes executors)
_EXECUTOR_JVM = b"CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    checkpoint_id: int
    #: the slot (parallel index) it happens in
    slot: int
    #: `exception`, `slow`, `disconnect` and `kill`: seconds after checkpoint `checkpoint_id`
    #: completed (None: a kill during that checkpoint's asynchronous phase)
    delay_s: float | None = None
    #: `slow`: how long the subtask stalls; `storage-hang`: how long the write blocks at most
    duration_s: float | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        """What identifies the fault in the log."""
        return str(self.kind), self.checkpoint_id, self.slot

    def describe(self, at: int | None = None) -> str:
        """What happened, at checkpoint `at` (None: the planned one)."""
        cid = self.checkpoint_id if at is None else at
        if self.delay_s is not None:
            when = f"{self.delay_s:.2f}s after checkpoint {cid} completed"
        else:
            when = _WHEN[self.kind].format(cid)
        where = "on the driver" if self.kind in DRIVER_KINDS else f"in slot {self.slot}"
        if self.kind is FaultKind.SLOW:
            where += f" stalled {self.duration_s:.2f}s"
        elif self.kind is FaultKind.STORAGE_HANG:
            when += f" (blocked up to {self.duration_s:.2f}s)"
        return f"{self.kind} {where} {when}"


@dataclass(frozen=True)
class FaultSchedule:
    """At which checkpoints faults happen: `at` the given ids, `every` N-th checkpoint (N, 2N,
    ...), or at `random` checkpoints, each with probability `rate`."""

    mode: str
    checkpoints: tuple[int, ...] = ()
    every: int = 0
    rate: float = 0.0

    @classmethod
    def parse(cls, text: str) -> FaultSchedule:
        """`at:3,7`, `every:2` or `random:0.3`; ValueError saying what is wrong."""
        mode, _, value = text.partition(":")
        try:
            if mode == "at":
                ids = tuple(sorted({int(v) for v in value.split(",")}))
                if ids and ids[0] >= 1:
                    return cls("at", checkpoints=ids)
            elif mode == "every" and int(value) >= 1:
                return cls("every", every=int(value))
            elif mode == "random" and 0 < float(value) <= 1:
                return cls("random", rate=float(value))
        except ValueError:
            pass
        raise ValueError(
            f"bad schedule {text!r}: use at:N[,M...] (checkpoint ids >= 1), every:N (N >= 1) "
            "or random:RATE (a probability per checkpoint, 0 < RATE <= 1)"
        )

    def checkpoint_ids(self, count: int, rng: random.Random) -> list[int]:
        """The checkpoint ids of `count` faults, ascending (one id may carry several)."""
        if self.mode == "at":
            return [self.checkpoints[i % len(self.checkpoints)] for i in range(count)]
        if self.mode == "every":
            return [self.every * (i + 1) for i in range(count)]
        ids, checkpoint = [], 0
        while len(ids) < count:
            checkpoint += 1
            if rng.random() < self.rate:
                ids.append(checkpoint)
        return ids


def plan_faults(
    schedule: FaultSchedule,
    kinds: Sequence[FaultKind],
    count: int,
    seed: int,
    slots: Mapping[FaultKind, int],
    interval_s: float,
    *,
    timeout_s: float,
) -> tuple[Fault, ...]:
    """`count` faults at the schedule's checkpoints, their kinds taken from `kinds` in a seeded
    shuffled cycle (every kind once before any twice), each in a random slot of the
    `slots[kind]` that have its site; delays within one checkpoint interval, stalls of 3 to 6
    intervals (at least 1 s), hangs of twice the checkpoint timeout `timeout_s`. Pure: the
    same arguments give the same plan."""
    if not kinds:
        raise ValueError("no fault kinds to plan")
    rng = random.Random(seed)
    ids = schedule.checkpoint_ids(count, rng)
    sequence: list[FaultKind] = []
    while len(sequence) < count:
        sequence.extend(rng.sample(list(kinds), len(kinds)))
    faults = []
    for checkpoint_id, kind in zip(ids, sequence, strict=False):
        slot = rng.randrange(max(slots.get(kind, 1), 1))
        delay = duration = None
        if kind in _DELAYED_KINDS or (kind is FaultKind.KILL and rng.random() < 0.5):
            delay = round(rng.uniform(0.1, 0.9) * interval_s, 3)
        if kind is FaultKind.SLOW:
            duration = round(max(rng.uniform(3, 6) * interval_s, 1.0), 3)
        elif kind is FaultKind.STORAGE_HANG:
            duration = 2 * timeout_s
        faults.append(Fault(kind, checkpoint_id, slot, delay, duration))
    return tuple(faults)


@dataclass(frozen=True)
class FaultPlan:
    """What a chaos run's slots inject (in `Deployment.faults`) and where they log it."""

    faults: tuple[Fault, ...]
    #: a local file every slot appends a JSON line to for each fault it carries out
    log_path: str
    #: which run of the driver this is (0, then 1 after a `driver-restart`, ...)
    driver: int = 0


def read_fault_log(path: str) -> list[dict[str, Any]]:
    """The faults carried out (`event` "fault") and the attempts' slots running (`event`
    "running"), in the order they were logged ([] if nothing was)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _logged(log_path: str) -> set[tuple[str, int, int]]:
    """The `Fault.key`s of the faults the log holds."""
    return _fault_keys(read_fault_log(log_path))


def _fault_keys(log: Sequence[dict[str, Any]]) -> set[tuple[str, int, int]]:
    return {(e["kind"], e["checkpoint_id"], e["slot"]) for e in log if e["event"] == "fault"}


def _append(log_path: str, entry: dict[str, Any]) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def log_fault(
    plan: FaultPlan, fault: Fault, attempt: int, at: int, note: str | None = None
) -> None:
    """Log `fault` as carried out in attempt `attempt` of `plan`'s driver, at checkpoint `at`
    (`note`: how, where the kind leaves a choice)."""
    entry = {
        "event": "fault",
        "kind": str(fault.kind),
        "checkpoint_id": fault.checkpoint_id,
        "at_checkpoint": at,
        "slot": fault.slot,
        "driver": plan.driver,
        "attempt": attempt,
        "time": time.time(),
        "description": fault.describe(at),
    }
    if note is not None:
        entry["note"] = note
    _append(plan.log_path, entry)


def due_driver_restart(
    plan: FaultPlan, log: Sequence[dict[str, Any]], completed: int | None
) -> Fault | None:
    """The `driver-restart` fault due now that checkpoint `completed` is the latest completed
    one (None: none yet), among those the fault log `log` does not hold."""
    done = _fault_keys(log)
    for fault in plan.faults:
        due = completed is not None and fault.checkpoint_id <= completed
        if fault.kind is FaultKind.DRIVER_RESTART and due and fault.key not in done:
            return fault
    return None


def fail_metadata_write(plan: FaultPlan | None, checkpoint_id: int, attempt: int) -> None:
    """The driver is about to write checkpoint `checkpoint_id`'s `_metadata` in attempt
    `attempt`: raises OSError if `plan` has a `metadata-write` fault due (at this checkpoint or
    an earlier one) that the log does not hold yet."""
    if plan is None:
        return
    done = _logged(plan.log_path)
    for fault in plan.faults:
        due = fault.kind is FaultKind.METADATA_WRITE and fault.checkpoint_id <= checkpoint_id
        if due and fault.key not in done:
            log_fault(plan, fault, attempt, checkpoint_id)
            raise OSError(
                errno.EIO,
                "tidegate chaos injected a checkpoint storage write failure: "
                + fault.describe(checkpoint_id),
            )


class FaultInjector:
    """Carries out the faults of one slot of one attempt; thread-safe (sites are reached from
    task threads, the snapshot executor and the control connection's reader). `network`: the
    slot's SlotNetwork (what `disconnect` faults shut a connection of; None: none)."""

    def __init__(
        self,
        plan: FaultPlan,
        slot: int,
        attempt: int,
        restored_checkpoint_id: int | None = None,
        network: Any = None,
    ) -> None:
        self.plan, self.slot, self.attempt, self.log_path = plan, slot, attempt, plan.log_path
        self.restored_checkpoint_id = restored_checkpoint_id
        self.network = network
        done = _logged(plan.log_path)
        self._pending = [f for f in plan.faults if f.slot == slot and f.key not in done]
        self._lock = threading.Lock()
        #: `exception` and `slow` faults due, with their checkpoints: the next batch of a user
        #: function's operator raises or stalls
        self.armed: list[tuple[Fault, int]] = []
        self._timers: list[threading.Timer] = []
        #: set when the slot ends: a hanging storage write gives up
        self._closed = threading.Event()

    def _take(self, match: Callable[[Fault], bool]) -> Fault | None:
        with self._lock:
            for fault in self._pending:
                if match(fault):
                    self._pending.remove(fault)
                    return fault
        return None

    def record(self, fault: Fault, at: int, note: str | None = None) -> None:
        """Log `fault` as carried out at checkpoint `at` (before it happens: a kill leaves no
        time after)."""
        log_fault(self.plan, fault, self.attempt, at, note)

    def subtasks_running(self) -> None:
        """Log that this slot's subtasks were created, their state restored."""
        _append(
            self.log_path,
            {
                "event": "running",
                "slot": self.slot,
                "driver": self.plan.driver,
                "attempt": self.attempt,
                "time": time.time(),
            },
        )

    def restoring(self) -> None:
        """Keyed state is being restored (from `restored_checkpoint_id`)."""
        restored = self.restored_checkpoint_id
        if restored is None:
            return
        fault = self._take(lambda f: f.kind is FaultKind.RESTORE and f.checkpoint_id <= restored)
        if fault is not None:
            self._fail(fault, restored)

    def _fail(self, fault: Fault, at: int) -> None:
        self.record(fault, at)
        raise InjectedFault(f"tidegate chaos injected a fault: {fault.describe(at)}")

    def _kill(self, fault: Fault, at: int) -> None:
        self.record(fault, at)
        os.kill(os.getpid(), signal.SIGKILL)

    def _kill_executor(self, fault: Fault, at: int) -> None:
        """SIGKILL the executor JVM this slot runs under: the whole executor is lost (its
        Python workers with it) and Spark starts another."""
        executor = executor_jvm(os.getpid())
        if executor is None:  # planned only for cluster masters: say so rather than skip it
            self.record(fault, at, "no executor JVM above the slot: the slot failed instead")
            raise InjectedFault(f"tidegate chaos found no executor JVM for {fault.describe(at)}")
        self.record(fault, at, f"executor JVM {executor} killed")
        os.kill(executor, signal.SIGKILL)

    def reach(self, site: Site, checkpoint_id: int) -> None:
        kind = _FAILING_AT[site]
        fault = self._take(lambda f: f.kind is kind and f.checkpoint_id <= checkpoint_id)
        if fault is not None:
            self._fail(fault, checkpoint_id)
        if site is Site.ASYNC_SNAPSHOT:
            kill = self._take(
                lambda f: (
                    f.kind is FaultKind.KILL
                    and f.delay_s is None
                    and f.checkpoint_id <= checkpoint_id
                )
            )
            if kill is not None:
                self._kill(kill, checkpoint_id)

    def on_message(self, message: Any) -> None:
        """A message from the driver: a completed checkpoint starts the timers of the faults
        due a while after it."""
        if not isinstance(message, NotifyCheckpointComplete):
            return
        cid = message.checkpoint_id
        with self._lock:  # all due ones first: a disconnect without a peer comes back pending
            due = [f for f in self._pending if f.delay_s is not None and f.checkpoint_id <= cid]
            self._pending = [f for f in self._pending if f not in due]
        for fault in due:
            action = {
                FaultKind.KILL: self._kill,
                FaultKind.DISCONNECT: self._disconnect,
                FaultKind.EXECUTOR_LOSS: self._kill_executor,
            }.get(fault.kind, self._arm)
            timer = threading.Timer(fault.delay_s or 0.0, action, args=(fault, cid))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def _arm(self, fault: Fault, at: int) -> None:
        with self._lock:
            self.armed = [*self.armed, (fault, at)]

    def fire_armed(self) -> None:
        """Called by a user function's operator before a batch while `armed` is not empty:
        stalls for the `slow` faults, raises the `exception`."""
        with self._lock:
            due, self.armed = self.armed, []
        for fault, at in sorted(due, key=lambda d: d[0].kind is FaultKind.EXCEPTION):
            if fault.kind is FaultKind.SLOW:
                self.record(fault, at)
                self._closed.wait(fault.duration_s or 0.0)
            else:
                self._fail(fault, at)

    def _disconnect(self, fault: Fault, at: int) -> None:
        """Shut down one of the slot's outgoing data connections to another slot (none: the
        fault waits for the next checkpoint)."""
        peers = [] if self.network is None else self.network.remote_peers()
        if not peers:
            with self._lock:
                self._pending.append(fault)
            return
        self.record(fault, at)
        self.network.drop_connection(peers[0])

    def storage_fault(self, checkpoint_id: int) -> Fault | None:
        """The `storage-write` or `storage-hang` fault due for a file of checkpoint
        `checkpoint_id`, if any."""
        storage = (FaultKind.STORAGE_WRITE, FaultKind.STORAGE_HANG)
        return self._take(lambda f: f.kind in storage and f.checkpoint_id <= checkpoint_id)

    def hang(self, seconds: float) -> None:
        """Block for `seconds`, or until the slot ends."""
        self._closed.wait(seconds)

    def close(self) -> None:
        self._closed.set()
        for timer in self._timers:
            timer.cancel()


#: the injector of the slot running in this process (None: chaos is off)
_active: FaultInjector | None = None


def install(
    plan: FaultPlan | None,
    slot: int,
    attempt: int,
    restored_checkpoint_id: int | None = None,
    network: Any = None,
) -> FaultInjector | None:
    """Start injecting `plan`'s faults of `slot` in this process (nothing if `plan` is None):
    of attempt `attempt`, which restores checkpoint `restored_checkpoint_id` (None: none), its
    data connections in `network`."""
    global _active
    _active = None
    if plan is not None:
        _active = FaultInjector(plan, slot, attempt, restored_checkpoint_id, network)
    return _active


def uninstall() -> None:
    """The slot ended: a reused worker process runs its next slot without its faults."""
    global _active
    if _active is not None:
        _active.close()
    _active = None


def reach(site: Site, checkpoint_id: int) -> None:
    """An injection site: raises (or kills this process) if a fault is due here."""
    if _active is not None:
        _active.reach(site, checkpoint_id)


def restoring() -> None:
    """An injection site: keyed state is being restored."""
    if _active is not None:
        _active.restoring()


def subtasks_running() -> None:
    """The slot created its subtasks (their state restored)."""
    if _active is not None:
        _active.subtasks_running()


def on_message(message: Any) -> None:
    """The slot received `message` from the driver."""
    if _active is not None:
        _active.on_message(message)


@dataclass(frozen=True)
class FaultyOperatorFactory:
    """Creates a user function's operator (with `make_operator`) whose batches first check for
    an armed `exception` or `slow` fault: wraps the operator, not its per-record loop, and only
    in a chaos run (the job is built with these factories only then)."""

    make_operator: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        operator = self.make_operator(*args, **kwargs)
        injector = _active
        if injector is None:
            return operator
        for name in ("process_batch", "process_batch1", "process_batch2"):
            inner = getattr(operator, name, None)
            if inner is not None:
                setattr(operator, name, _checked(inner, injector))
        return operator


def _checked(process: Callable[[list], Any], injector: FaultInjector) -> Callable[[list], Any]:
    def process_batch(records: list) -> Any:
        if injector.armed:
            injector.fire_armed()
        return process(records)

    return process_batch


class FaultyCheckpointStorage(CheckpointStorage):
    """The slot's checkpoint storage in a chaos run: a file of a checkpoint with a due
    `storage-write` fault fails with EIO at its first write (a partial, empty file stays); with
    a `storage-hang` fault, the first write blocks first (`FaultInjector.hang`), then fails
    without writing."""

    def open_write(self, path: str) -> Any:
        raw = super().open_write(path)
        directory, injector = posixpath.dirname(path), _active
        match = re.fullmatch(r"chk-(\d+)", posixpath.basename(directory))
        if injector is None or match is None or directory != self.checkpoint_dir(int(match[1])):
            return raw  # not a file of one of the job's checkpoints
        fault = injector.storage_fault(int(match[1]))
        return raw if fault is None else _FailingFile(raw, injector, fault, int(match[1]))


class _FailingFile:
    def __init__(self, raw: Any, injector: FaultInjector, fault: Fault, at: int) -> None:
        self._raw, self._injector, self._at = raw, injector, at
        self._fault: Fault | None = fault
        self._description = fault.describe(at)

    def write(self, data: Any) -> int:
        fault, self._fault = self._fault, None
        if fault is not None:
            self._injector.record(fault, self._at)
            if fault.kind is FaultKind.STORAGE_HANG:
                self._injector.hang(fault.duration_s or 0.0)
        raise OSError(
            errno.EIO,
            f"tidegate chaos injected a checkpoint storage write failure: {self._description}",
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __enter__(self) -> _FailingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()


def executor_jvm(pid: int, levels: int = 6) -> int | None:
    """The pid of the executor JVM above process `pid` (a slot runs in a Python worker forked
    by PySpark's daemon, which the executor started), or None: no executor JVM within `levels`
    ancestors (a local master runs executors inside the driver's JVM)."""
    for _ in range(levels):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])  # ppid, after the name
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if _EXECUTOR_JVM in f.read():
                    return pid
        except (OSError, ValueError, IndexError):
            return None
        if pid <= 1:
            return None
    return None

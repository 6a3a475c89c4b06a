"""The life cycle of one job attempt as a pure state machine: events in, commands out.

`AttemptState.handle(event, now)` takes what the slots, the runner, the coordinator and the
user report (the JobMaster's queue), or a `Tick` when nothing arrived before `next_tick(now)`,
and returns the commands its executor (`JobAttempt`, deploy/attempt.py) applies in list order.
It does no I/O, reads no clock (`now` is a monotonic time in seconds) and starts no thread: the
shape of runtime/barriers.py and of dask's `WorkerState.handle_stimulus`.

The phases of an attempt (DESIGN §3):

1. REGISTERING: wait (at most `registration_timeout_s`) until every slot registered, then send
   the address book and start checkpointing.
2. RUNNING: route acks, declines, metrics and user requests; fail a slot that sent nothing for
   `heartbeat_timeout_s`; once every source finished, the final checkpoint is due; once every
   slot finished after it completed, the attempt FINISHED.
3. Two phases read the queue a moment longer before the attempt ends:
   - BLAMING: a slot failed. Its peers fail too (their connections to it break), so for
     `root_cause_window_s` only failures of this attempt's slots are collected (anything else
     but a user's snapshot request is dropped); the attempt then fails with the first that is
     not such a consequence.
   - DRAINING: the runner ended. It can see the slots end before their last messages (sent
     just before they return) were read off the sockets, so events are handled as usual for
     `slot_message_grace_s` (0.5 s when the runner failed before any slot registered), without
     heartbeat checks; an outcome reached meanwhile wins, else the attempt fails.
4. ENDED once `EndAttempt` is out; events change nothing after it, except the bookkeeping of
   final checkpoints. `TearDown` (in any phase) returns what releases the attempt.
"""

from __future__ import annotations

import enum
import re
import sys
from collections.abc import Collection
from dataclasses import dataclass

from tidegate.deploy.attempt_events import (
    AttemptOutcome,
    Cancel,
    CancelLateSlot,
    CancelRunner,
    CancelSlots,
    CheckpointCompleted,
    CloseRequests,
    Command,
    EndAttempt,
    Event,
    FailJob,
    Failure,
    Fenced,
    FinalCheckpointDropped,
    FinalCheckpointTriggered,
    JoinRunner,
    KeepCheckpoints,
    RestartFreely,
    RetryFinalCheckpoint,
    RouteAck,
    RouteDecline,
    RouteMetrics,
    RouteSnapshotRequest,
    RunnerEnded,
    SendAddresses,
    SettleFailedStop,
    StartCheckpointing,
    StopAfterDrainFailed,
    StopCheckpointing,
    TearDown,
    Tick,
    TriggerFinalCheckpoint,
)
from tidegate.deploy.control_server import SlotLost
from tidegate.deploy.snapshot_requests import SnapshotRequest, StopFailed
from tidegate.runtime.messages import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    RegisterSlot,
    SlotFailed,
    SlotFinished,
    SlotMetrics,
    SourceFinished,
    SubtaskId,
)

REGISTRATION_TIMEOUT_S = 180.0
TEARDOWN_TIMEOUT_S = 60.0
ROOT_CAUSE_WINDOW_S = 0.3
SLOT_MESSAGE_GRACE_S = 5.0
#: the grace when the runner failed before any slot registered
UNREGISTERED_GRACE_S = 0.5
#: how often heartbeats (and the registration deadline) are checked when no event arrives
CHECK_INTERVAL_S = 1.0
LOAD_FAILURE = "could not load the job"  # runtime/slot.py: deterministic, never restarted
#: slot errors (by exception class name) that another attempt would hit again
NOT_RESTARTED = frozenset({"StorageNotSharedError"})


def restartable(error: str) -> bool:
    """Whether a slot's error (`module.Class: message`) may be cured by a restart: not when
    the job cannot load, nor for the errors of NOT_RESTARTED."""
    if error.startswith(LOAD_FAILURE):
        return False
    return error.split(":", 1)[0].rsplit(".", 1)[-1] not in NOT_RESTARTED


#: errors a slot reports when a peer failed first (its connections broke, it was cancelled)
_CONSEQUENCES = (
    "ConnectionResetError",
    "BrokenPipeError",
    "EOFError",
    "TaskCancelledError",
    "ConnectionRefusedError",
    "ConnectionAbortedError",
)


class FinalStep(enum.Enum):
    """How `TriggerFinalCheckpoint` is carried out, given what the coordinator has pending."""

    UNDER_WAY = "a final checkpoint is pending already"
    DRAINED_SAVEPOINT = "stop-with-savepoint --drain: its savepoint is the final checkpoint"
    TRIGGER = "trigger a final checkpoint"


class Phase(enum.Enum):
    REGISTERING = "waiting for every slot to register"
    RUNNING = "running"
    BLAMING = "a slot failed: collecting its peers' failures to find the root cause"
    DRAINING = "the runner ended: reading the slots' last messages"
    ENDED = "the outcome is out"
    TORN_DOWN = "released"


@dataclass(frozen=True)
class AttemptConfig:
    attempt: int
    num_slots: int
    #: every source subtask: the final checkpoint is due once all of them finished
    sources: frozenset[SubtaskId]
    heartbeat_timeout_s: float
    registration_timeout_s: float = REGISTRATION_TIMEOUT_S
    root_cause_window_s: float = ROOT_CAUSE_WINDOW_S
    slot_message_grace_s: float = SLOT_MESSAGE_GRACE_S
    check_interval_s: float = CHECK_INTERVAL_S
    teardown_timeout_s: float = TEARDOWN_TIMEOUT_S


class AttemptState:
    """The decisions of one attempt. Only the JobMaster's thread calls `handle`; `is_final` and
    `tearing_down` are also read by the coordinator's hooks on its scheduler thread."""

    def __init__(self, config: AttemptConfig, now: float) -> None:
        self.config = config
        self.phase = Phase.REGISTERING
        self.registered: dict[int, RegisterSlot] = {}
        self.finished_slots: set[int] = set()
        self.finished_sources: set[SubtaskId] = set()
        #: the final checkpoints triggered (a stop-with-savepoint's savepoint is one)
        self.final_ids: set[int] = set()
        self.final_completed = False
        self.runner_ended = False
        #: the addresses went out and the coordinator started
        self.checkpointing = False
        #: when each slot was last heard of (from RUNNING on)
        self.last_seen: dict[int, float] = {}
        #: the end of the registration, of the root-cause window or of the drain
        self.deadline = now + config.registration_timeout_s
        self._failures: list[SlotFailed] = []
        self._runner_error: BaseException | None = None

    @property
    def tearing_down(self) -> bool:
        return self.phase is Phase.TORN_DOWN

    def is_final(self, checkpoint_id: int) -> bool:
        return checkpoint_id in self.final_ids

    def next_tick(self, now: float) -> float:
        """When to hand in a `Tick` if no event arrives first."""
        match self.phase:
            case Phase.REGISTERING:
                return min(self.deadline, now + self.config.check_interval_s)
            case Phase.BLAMING | Phase.DRAINING:
                return self.deadline
            case _:
                return now + self.config.check_interval_s

    def final_step(self, pending_ids: Collection[int], draining: bool) -> FinalStep:
        """`TriggerFinalCheckpoint` given the coordinator's pending checkpoints and whether a
        stop-with-savepoint drained the sources (both owned by others, so asked at once)."""
        if any(cid in self.final_ids for cid in pending_ids):
            return FinalStep.UNDER_WAY
        if draining:
            return FinalStep.DRAINED_SAVEPOINT
        return FinalStep.TRIGGER

    def handle(self, event: Event, now: float) -> list[Command]:
        """Apply one event; the commands to execute, in order."""
        match event:
            case TearDown():
                return self._tear_down()
            case FinalCheckpointTriggered(checkpoint_id=cid):
                self.final_ids.add(cid)
                return []
            case FinalCheckpointDropped(checkpoint_id=cid):
                self.final_ids.discard(cid)
                return []
            case CheckpointCompleted(checkpoint_id=cid):
                self.final_completed |= cid in self.final_ids
                return []
        match self.phase:
            case Phase.REGISTERING:
                return self._registering(event, now)
            case Phase.RUNNING:
                return self._running(event, now)
            case Phase.BLAMING:
                return self._blaming(event, now)
            case Phase.DRAINING:
                return self._draining(event, now)
            case _:
                return []

    # phases ----------------------------------------------------------------------------------
    def _registering(self, event: Event, now: float) -> list[Command]:
        """Step 1: every slot registers before the deadline, or the attempt fails."""
        commands = [] if isinstance(event, Tick) else self._on_event(event, now)
        if self.phase is not Phase.REGISTERING:
            return commands
        if len(self.registered) >= self.config.num_slots:
            return commands + self._start(now)
        if now >= self.deadline:
            return commands + self._fail(
                f"only {len(self.registered)} of {self.config.num_slots} slots started within "
                f"{self.config.registration_timeout_s:.0f}s; does the cluster have enough free "
                "task slots?"
            )
        return commands

    def _start(self, now: float) -> list[Command]:
        """The end of step 1: every slot registered, RUNNING begins."""
        self.phase = Phase.RUNNING
        self.checkpointing = True
        self.last_seen = dict.fromkeys(self.registered, now)
        return [
            SendAddresses(
                {s: r.data_address for s, r in self.registered.items()},
                {s: r.pid for s, r in self.registered.items()},
                {s: r.host for s, r in self.registered.items()},
            ),
            StartCheckpointing(),
        ]

    def _running(self, event: Event, now: float) -> list[Command]:
        """Step 2: each event, then the heartbeats (after every event and on every tick)."""
        commands = [] if isinstance(event, Tick) else self._on_event(event, now)
        if self.phase is Phase.RUNNING:
            commands += self._check_heartbeats(now)
        return commands

    def _check_heartbeats(self, now: float) -> list[Command]:
        """A slot that stops reporting (hung, swapped out, SIGSTOPped) fails the attempt."""
        timeout_s = self.config.heartbeat_timeout_s
        for slot, seen in self.last_seen.items():
            if slot not in self.finished_slots and now - seen > timeout_s:
                return self._fail(
                    f"slot {slot}{self._who(slot)} sent no heartbeat for {timeout_s:.0f}s: "
                    "it is hung or overloaded"
                )
        return []

    def _blaming(self, event: Event, now: float) -> list[Command]:
        """Step 3, after a slot failed: collect its peers' failures, then blame the root. A
        user's snapshot request is routed as usual, so that its future settles (its checkpoint
        fails with the attempt, or it is refused) instead of waiting forever."""
        commands: list[Command] = []
        if isinstance(event, SlotFailed) and event.attempt == self.config.attempt:
            self._failures.append(event)
        elif isinstance(event, SnapshotRequest):
            commands.append(RouteSnapshotRequest(event))
        if now < self.deadline:
            return commands
        root = next((f for f in self._failures if not is_consequence(f.error)), self._failures[0])
        return commands + self._fail(
            f"slot {root.slot} failed: {root.error}",
            root.traceback,
            recoverable=restartable(root.error),
        )

    def _draining(self, event: Event, now: float) -> list[Command]:
        """Step 3, after the runner ended: its slots' last messages may still finish it."""
        commands = [] if isinstance(event, Tick | RunnerEnded) else self._on_event(event, now)
        if self.phase is not Phase.DRAINING or now < self.deadline:
            return commands
        error = self._runner_error
        return self._fail(
            "the slots' runner ended before the job finished"
            + (f": {runner_error_text(error)}" if error else "")
        )

    # events ----------------------------------------------------------------------------------
    def _on_event(self, event: Event, now: float) -> list[Command]:
        """One event in REGISTERING, RUNNING or DRAINING."""
        if getattr(event, "attempt", self.config.attempt) != self.config.attempt:
            if isinstance(event, RegisterSlot):  # a late slot of an ended attempt: stop it
                return [CancelLateSlot(event.attempt, event.slot)]
            return []  # a message from an earlier attempt (a zombie slot): ignore it
        slot_of_event = getattr(event, "slot", None)
        if slot_of_event is not None and self.checkpointing:
            self.last_seen[slot_of_event] = now  # any message is a sign of life
        match event:
            case RegisterSlot(slot=slot):
                self.registered[slot] = event
            case AcknowledgeCheckpoint() if self.checkpointing:
                return [RouteAck(event)]
            case DeclineCheckpoint() if self.checkpointing:
                return [RouteDecline(event)]
            case SlotMetrics():
                return [RouteMetrics(event)]
            case SnapshotRequest():
                return [RouteSnapshotRequest(event)]
            case SourceFinished(subtask=subtask):
                self.finished_sources.add(subtask)
                return self._final_checkpoint_due()
            case RetryFinalCheckpoint():
                return self._final_checkpoint_due()
            case SlotFinished(slot=slot):
                self.finished_slots.add(slot)
                return self._check_finished()
            case _:
                return self._on_ending_event(event, now)
        return []

    def _on_ending_event(self, event: Event, now: float) -> list[Command]:
        """The events that may end the attempt (or start the phases that end it)."""
        match event:
            case SlotFailed():
                self.phase, self.deadline = Phase.BLAMING, now + self.config.root_cause_window_s
                self._failures = [event]
            case SlotLost(slot=slot) if slot not in self.finished_slots:
                return self._fail(f"slot {slot}{self._who(slot)} was lost: its worker process died")
            case RunnerEnded(error=error):
                self.runner_ended, self._runner_error = True, error
                grace = self.config.slot_message_grace_s
                if error is not None and not self.registered:
                    # no slot ever reached the driver (e.g. the executors' Python cannot start
                    # one): only a registration already on its way could still come
                    grace = min(grace, UNREGISTERED_GRACE_S)
                self.phase, self.deadline = Phase.DRAINING, now + grace
            case FailJob(reason=reason):
                return self._fail(reason)
            case Fenced(reason=reason):
                failure = self._fail(f"FencedWriterError: {reason}", recoverable=False)
                return [KeepCheckpoints(), *failure]
            case Cancel():
                return self._end(AttemptOutcome.CANCELED)
            case StopFailed(reason=reason):
                return [SettleFailedStop(reason)]
            case StopAfterDrainFailed(reason=reason):
                return [
                    RestartFreely(),
                    *self._fail(
                        f"stop-with-savepoint --drain failed after the sources were drained "
                        f"({reason}); restarting from the latest checkpoint or savepoint"
                    ),
                ]
        return []

    def _final_checkpoint_due(self) -> list[Command]:
        if self.finished_sources != self.config.sources or self.final_completed:
            return []
        return [TriggerFinalCheckpoint()] if self.checkpointing else []

    def _check_finished(self) -> list[Command]:
        if len(self.finished_slots) < self.config.num_slots:
            return []
        if not self.final_completed:
            return self._fail("every slot ended but the final checkpoint never completed")
        return [JoinRunner(self.config.teardown_timeout_s), *self._end(AttemptOutcome.FINISHED)]

    # Step 4: the outcome --------------------------------------------------------------------
    def _fail(self, message: str, detail: str = "", recoverable: bool = True) -> list[Command]:
        self.phase = Phase.ENDED
        return [EndAttempt(AttemptOutcome.FAILED, Failure(message, detail, recoverable))]

    def _end(self, outcome: AttemptOutcome) -> list[Command]:
        self.phase = Phase.ENDED
        return [EndAttempt(outcome)]

    def _tear_down(self) -> list[Command]:
        commands: list[Command] = []
        if self.checkpointing:
            commands.append(StopCheckpointing("job attempt ended"))
        commands += [CloseRequests(), CancelSlots("the job attempt ended")]
        if not self.runner_ended:
            commands.append(CancelRunner(self.config.teardown_timeout_s))
        self.phase = Phase.TORN_DOWN
        return commands

    def _who(self, slot: int) -> str:
        reg = self.registered.get(slot)
        return f" (pid {reg.pid} on {reg.host})" if reg else ""


def is_consequence(error: str) -> bool:
    """Whether a slot's error is what a peer's failure causes (not a root cause)."""
    return error.startswith(_CONSEQUENCES)


#: an exception as a traceback's last line shows it (`Name: message`), and as Python reports
#: a failed `python -m` in parentheses at a line's end, which Spark quotes ("Error from python
#: worker") when its executors' Python cannot import tidegate's worker daemon
_RAISED = re.compile(r"^([A-Za-z_.]+(?:Error|Exception): .*)")
_QUOTED = re.compile(r"\(([A-Za-z_.]+(?:Error|Exception): .*)\)$")
#: exceptions of the JVM (Spark's own, Java's) rather than of the Python worker
_JVM_PACKAGES = ("org.", "java.", "scala.", "py4j.")
#: what a Spark worker's error says when the executors run the wrong Python -> the problem
_EXECUTOR_PYTHON_PROBLEMS = (
    ("No module named 'tidegate'", "the Spark executors' Python cannot import tidegate"),
    ("Cannot run program", "the Spark executors cannot start that Python"),
    ("PYTHON_VERSION_MISMATCH", "the Spark executors' Python is not the driver's minor version"),
)
_EXECUTOR_PYTHON_FIX = (
    "set spark.pyspark.python (spark-submit --conf, tidegate run --conf) or PYSPARK_PYTHON to "
    f"a Python {sys.version_info.major}.{sys.version_info.minor} (the driver's) that has "
    "tidegate installed, at the same path on every executor host"
)


def runner_error_text(error: BaseException) -> str:
    """The useful part of a runner's error: the exception a Spark worker raised (Py4J wraps it
    in a long Java trace), with a hint when the executors' Python is missing, of another
    version, or cannot import tidegate."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    raised = [m.group(1) for line in lines if (m := _RAISED.match(line) or _QUOTED.search(line))]
    python = [text for text in raised if not text.startswith(_JVM_PACKAGES)]
    if python or raised:  # the innermost: the Python worker's own, else the JVM's
        found = (python or raised)[-1]
    else:
        found = lines[0] if lines else type(error).__name__
    for marker, problem in _EXECUTOR_PYTHON_PROBLEMS:
        if marker in found:
            return f"{found} — {problem}: {_EXECUTOR_PYTHON_FIX}"
    return found

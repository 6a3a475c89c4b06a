"""The events and commands of a job attempt's state machine (deploy/attempt_state.py).

Events are what the JobMaster's queue delivers besides the slots' messages
(runtime/messages.py), the user's requests (deploy/snapshot_requests.py) and lost connections
(deploy/control_server.py), plus what the executor reports back; commands are what the
executor (`JobAttempt`, deploy/attempt.py) carries out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

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
)


# Events (besides the slots' messages, runtime/messages.py, and the user's requests) ----------
@dataclass(frozen=True)
class RunnerEnded:
    """The runner's Spark job or local processes ended (`error`: why, if they failed)."""

    attempt: int
    error: BaseException | None


@dataclass(frozen=True)
class FailJob:
    """The coordinator gave up (e.g. too many failed checkpoints)."""

    attempt: int
    reason: str


@dataclass(frozen=True)
class Cancel:
    """The user cancelled the job."""


@dataclass(frozen=True)
class RetryFinalCheckpoint:
    """A final checkpoint was aborted a moment ago: take another one."""

    attempt: int


@dataclass(frozen=True)
class Fenced:
    """The job directory's fence refused this driver's write: another one took over."""

    attempt: int
    reason: str


@dataclass(frozen=True)
class StopAfterDrainFailed:
    """The executor settled a failed stop-with-savepoint whose sources were drained already:
    they cannot resume, so the attempt restarts."""

    reason: str


@dataclass(frozen=True)
class FinalCheckpointTriggered:
    """A final checkpoint (or the final savepoint of a stop) was triggered with this id."""

    checkpoint_id: int


@dataclass(frozen=True)
class FinalCheckpointDropped:
    """A failed stop's savepoint is no final checkpoint any more (None: it was never taken)."""

    checkpoint_id: int | None


@dataclass(frozen=True)
class CheckpointCompleted:
    checkpoint_id: int


@dataclass(frozen=True)
class Tick:
    """Nothing arrived until `next_tick`: check the deadlines."""


@dataclass(frozen=True)
class TearDown:
    """The JobMaster releases the attempt, whatever its outcome."""


Event = (
    RegisterSlot
    | AcknowledgeCheckpoint
    | DeclineCheckpoint
    | SourceFinished
    | SlotMetrics
    | SlotFinished
    | SlotFailed
    | SlotLost
    | RunnerEnded
    | FailJob
    | Cancel
    | RetryFinalCheckpoint
    | Fenced
    | SnapshotRequest
    | StopFailed
    | StopAfterDrainFailed
    | FinalCheckpointTriggered
    | FinalCheckpointDropped
    | CheckpointCompleted
    | Tick
    | TearDown
)


# Commands ------------------------------------------------------------------------------------
class AttemptOutcome(enum.Enum):
    FINISHED = "finished"
    CANCELED = "canceled"
    #: the JobMaster restarts the job or fails it, after its restart strategy
    FAILED = "failed"


@dataclass(frozen=True)
class Failure:
    message: str
    detail: str = ""
    #: False when a restart would fail the same way (the workers cannot load the job)
    recoverable: bool = True


@dataclass(frozen=True)
class SendAddresses:
    """Every slot registered: broadcast their data addresses; the job is RUNNING."""

    addresses: Mapping[int, tuple[str, int]]
    pids: Mapping[int, int]
    hosts: Mapping[int, str]


@dataclass(frozen=True)
class StartCheckpointing:
    """Create and start the attempt's CheckpointCoordinator."""


@dataclass(frozen=True)
class TriggerFinalCheckpoint:
    """Every source finished: make sure a final checkpoint is under way (`final_step`)."""


@dataclass(frozen=True)
class CancelLateSlot:
    """A slot of an ended attempt registered late: stop it."""

    attempt: int
    slot: int


@dataclass(frozen=True)
class RouteAck:
    ack: AcknowledgeCheckpoint


@dataclass(frozen=True)
class RouteDecline:
    decline: DeclineCheckpoint


@dataclass(frozen=True)
class RouteMetrics:
    metrics: SlotMetrics


@dataclass(frozen=True)
class RouteSnapshotRequest:
    request: SnapshotRequest


@dataclass(frozen=True)
class SettleFailedStop:
    """The stop-with-savepoint failed: settle it (`StopAfterDrainFailed` if it had drained)."""

    reason: str


@dataclass(frozen=True)
class KeepCheckpoints:
    """Delete none of the job's checkpoints when it ends (another driver may use them)."""


@dataclass(frozen=True)
class RestartFreely:
    """The next restart is no failure: no delay, not counted by the restart strategy."""


@dataclass(frozen=True)
class JoinRunner:
    """Wait for the runner, so the next job on the same Spark context starts clean."""

    timeout_s: float


@dataclass(frozen=True)
class EndAttempt:
    """The attempt's outcome; `failure` says why when it FAILED. Always the last command."""

    outcome: AttemptOutcome
    failure: Failure | None = None


@dataclass(frozen=True)
class StopCheckpointing:
    reason: str


@dataclass(frozen=True)
class CloseRequests:
    """Fail the user requests still open (but a completed stop-with-savepoint's)."""


@dataclass(frozen=True)
class CancelSlots:
    """Tell every slot of the attempt to stop."""

    reason: str


@dataclass(frozen=True)
class CancelRunner:
    """Cancel the runner's job and wait for its slots to stop."""

    timeout_s: float


Command = (
    SendAddresses
    | StartCheckpointing
    | TriggerFinalCheckpoint
    | CancelLateSlot
    | RouteAck
    | RouteDecline
    | RouteMetrics
    | RouteSnapshotRequest
    | SettleFailedStop
    | KeepCheckpoints
    | RestartFreely
    | JoinRunner
    | EndAttempt
    | StopCheckpointing
    | CloseRequests
    | CancelSlots
    | CancelRunner
)

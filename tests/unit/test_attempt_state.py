"""Scripted tests of a job attempt's life cycle (tidegate.deploy.attempt_state): events with an
injected `now` in, commands out. No processes, sockets or Spark."""

from __future__ import annotations

import random

import pytest

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
from tidegate.deploy.attempt_state import (
    LOAD_FAILURE,
    UNREGISTERED_GRACE_S,
    AttemptConfig,
    AttemptState,
    FinalStep,
    Phase,
)
from tidegate.deploy.control_server import SlotLost
from tidegate.deploy.snapshot_requests import SnapshotKind, SnapshotRequest, StopFailed
from tidegate.runtime.messages import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    RegisterSlot,
    SlotFailed,
    SlotFinished,
    SlotMetrics,
    SourceFinished,
)

ATTEMPT = 3
SLOTS = 2
SOURCES = frozenset({("src", 0), ("src", 1)})
HEARTBEAT_TIMEOUT_S = 10.0
REGISTRATION_TIMEOUT_S = 60.0
WINDOW_S = 0.3
GRACE_S = 5.0


def config(**overrides: float) -> AttemptConfig:
    settings = {
        "registration_timeout_s": REGISTRATION_TIMEOUT_S,
        "root_cause_window_s": WINDOW_S,
        "slot_message_grace_s": GRACE_S,
        "check_interval_s": 1.0,
        "teardown_timeout_s": 60.0,
        **overrides,
    }
    return AttemptConfig(ATTEMPT, SLOTS, SOURCES, HEARTBEAT_TIMEOUT_S, **settings)


def register(slot: int, attempt: int = ATTEMPT) -> RegisterSlot:
    return RegisterSlot(attempt, slot, pid=100 + slot, host="worker", data_address=("w", slot))


def failed(slot: int, error: str, attempt: int = ATTEMPT) -> SlotFailed:
    return SlotFailed(attempt, slot, error, traceback=f"traceback of slot {slot}")


def running(now: float = 0.0) -> AttemptState:
    """An attempt whose slots all registered at `now`."""
    state = AttemptState(config(), now)
    state.handle(register(0), now)
    state.handle(register(1), now)
    assert state.phase is Phase.RUNNING
    return state


def feed(state: AttemptState, *timed: tuple[float, Event]) -> list[Command]:
    """Hand in (now, event) pairs; the commands of all of them."""
    return [command for now, event in timed for command in state.handle(event, now)]


def failure(commands: list[Command]) -> Failure:
    match commands[-1]:
        case EndAttempt(outcome=AttemptOutcome.FAILED, failure=Failure() as why):
            return why
    raise AssertionError(f"the attempt did not fail: {commands}")


def sources_finish(state: AttemptState, now: float) -> list[Command]:
    return feed(state, *((now, SourceFinished(ATTEMPT, s)) for s in sorted(SOURCES)))


# ------------------------------------------------------------------------------- registration


def test_the_addresses_go_out_and_checkpointing_starts_once_every_slot_registered() -> None:
    state = AttemptState(config(), now=0.0)
    assert state.handle(register(1), 1.0) == []
    assert state.handle(register(0), 2.0) == [
        SendAddresses({1: ("w", 1), 0: ("w", 0)}, {1: 101, 0: 100}, {1: "worker", 0: "worker"}),
        StartCheckpointing(),
    ]
    assert state.phase is Phase.RUNNING and state.checkpointing


def test_a_slot_missing_at_the_registration_deadline_fails_the_attempt() -> None:
    state = AttemptState(config(), now=0.0)
    assert feed(state, (1.0, register(0)), (59.9, Tick())) == []
    commands = state.handle(Tick(), REGISTRATION_TIMEOUT_S)
    assert failure(commands).message == (
        "only 1 of 2 slots started within 60s; does the cluster have enough free task slots?"
    )
    assert failure(commands).recoverable


def test_registration_is_checked_every_interval_and_at_its_deadline() -> None:
    state = AttemptState(config(), now=0.0)
    assert state.next_tick(10.0) == 11.0
    assert state.next_tick(59.5) == REGISTRATION_TIMEOUT_S


def test_a_late_slot_of_an_earlier_attempt_is_cancelled_and_its_other_messages_ignored() -> None:
    state = running()
    assert state.handle(register(0, attempt=ATTEMPT - 1), 1.0) == [CancelLateSlot(ATTEMPT - 1, 0)]
    assert state.handle(failed(1, "ValueError: old", attempt=ATTEMPT - 1), 1.0) == []
    assert state.handle(RunnerEnded(ATTEMPT - 1, None), 1.0) == []
    assert state.phase is Phase.RUNNING


def test_acks_and_declines_before_checkpointing_started_are_dropped() -> None:
    state = AttemptState(config(), now=0.0)
    ack = AcknowledgeCheckpoint(ATTEMPT, ("op", 0), 1)
    decline = DeclineCheckpoint(ATTEMPT, ("op", 0), 1, "no")
    assert feed(state, (1.0, ack), (1.0, decline)) == []


# ------------------------------------------------------------------------------------ running


def test_acks_declines_metrics_and_user_requests_are_routed_while_running() -> None:
    state = running()
    ack = AcknowledgeCheckpoint(ATTEMPT, ("op", 0), 1)
    decline = DeclineCheckpoint(ATTEMPT, ("op", 1), 2, "no")
    metrics = SlotMetrics(ATTEMPT, 0, {})
    request = SnapshotRequest(SnapshotKind.CHECKPOINT)
    assert feed(state, (1.0, ack), (1.0, decline), (1.0, metrics), (1.0, request)) == [
        RouteAck(ack),
        RouteDecline(decline),
        RouteMetrics(metrics),
        RouteSnapshotRequest(request),
    ]


def test_a_slot_silent_for_longer_than_the_heartbeat_timeout_fails_the_attempt() -> None:
    state = running(now=0.0)
    assert state.handle(SlotMetrics(ATTEMPT, 0, {}), 8.0) == [
        RouteMetrics(SlotMetrics(ATTEMPT, 0, {}))
    ]
    assert state.handle(Tick(), HEARTBEAT_TIMEOUT_S) == []  # not longer yet
    commands = state.handle(Tick(), HEARTBEAT_TIMEOUT_S + 0.5)
    assert failure(commands).message == (
        "slot 1 (pid 101 on worker) sent no heartbeat for 10s: it is hung or overloaded"
    )


def test_a_message_of_this_attempt_counts_as_a_heartbeat_one_of_an_earlier_attempt_not() -> None:
    state = running(now=0.0)
    feed(
        state,
        (8.0, DeclineCheckpoint(ATTEMPT, ("op", 0), 1, "busy")),  # no slot: not a heartbeat
        (8.0, SlotMetrics(ATTEMPT, 0, {})),
        (8.0, failed(1, "ValueError: zombie", attempt=ATTEMPT - 1)),
        (9.0, SlotLost(ATTEMPT - 1, 1)),
    )
    assert state.handle(Tick(), 10.5) == [
        EndAttempt(
            AttemptOutcome.FAILED,
            Failure(
                "slot 1 (pid 101 on worker) sent no heartbeat for 10s: it is hung or overloaded"
            ),
        )
    ]


def test_a_finished_slot_needs_no_heartbeat() -> None:
    state = running(now=0.0)
    state.handle(SlotFinished(ATTEMPT, 1), 1.0)
    assert state.handle(SlotMetrics(ATTEMPT, 0, {}), 20.0) == [
        RouteMetrics(SlotMetrics(ATTEMPT, 0, {}))
    ]
    assert state.phase is Phase.RUNNING


def test_heartbeats_are_checked_every_interval_while_running() -> None:
    assert running().next_tick(42.0) == 43.0


# ------------------------------------------------------------------------ the final checkpoint


def test_the_final_checkpoint_is_due_once_every_source_finished() -> None:
    state = running()
    assert state.handle(SourceFinished(ATTEMPT, ("src", 1)), 1.0) == []
    assert state.handle(SourceFinished(ATTEMPT, ("src", 0)), 1.0) == [TriggerFinalCheckpoint()]


def test_sources_finishing_then_the_final_checkpoint_then_every_slot_finishing_finish_it() -> None:
    state = running()
    assert sources_finish(state, 1.0) == [TriggerFinalCheckpoint()]
    state.handle(FinalCheckpointTriggered(7), 1.1)
    assert state.final_step(pending_ids=(6, 7), draining=False) is FinalStep.UNDER_WAY
    assert state.handle(CheckpointCompleted(7), 2.0) == []
    assert state.handle(SlotFinished(ATTEMPT, 0), 2.5) == []
    assert state.handle(SlotFinished(ATTEMPT, 1), 2.6) == [
        JoinRunner(60.0),
        EndAttempt(AttemptOutcome.FINISHED),
    ]
    assert state.phase is Phase.ENDED


def test_every_slot_ending_before_the_final_checkpoint_completed_fails_the_attempt() -> None:
    state = running()
    sources_finish(state, 1.0)
    state.handle(FinalCheckpointTriggered(7), 1.0)
    state.handle(CheckpointCompleted(6), 1.5)  # a periodic one: not final
    commands = feed(state, (2.0, SlotFinished(ATTEMPT, 0)), (2.0, SlotFinished(ATTEMPT, 1)))
    assert failure(commands).message == "every slot ended but the final checkpoint never completed"


def test_an_aborted_final_checkpoint_is_retried_until_one_completed() -> None:
    state = running()
    sources_finish(state, 1.0)
    state.handle(FinalCheckpointTriggered(7), 1.0)
    assert state.is_final(7) and not state.is_final(6)
    assert state.handle(RetryFinalCheckpoint(ATTEMPT), 2.0) == [TriggerFinalCheckpoint()]
    assert state.final_step(pending_ids=(), draining=False) is FinalStep.TRIGGER
    state.handle(FinalCheckpointTriggered(8), 2.0)
    state.handle(CheckpointCompleted(8), 3.0)
    assert state.handle(RetryFinalCheckpoint(ATTEMPT), 3.5) == []


def test_a_drained_stop_takes_its_savepoint_as_the_final_checkpoint() -> None:
    state = running()
    assert state.final_step(pending_ids=(4,), draining=True) is FinalStep.DRAINED_SAVEPOINT


def test_a_stop_savepoint_marked_final_completes_the_attempt_unless_it_was_dropped() -> None:
    state = running()
    state.handle(FinalCheckpointTriggered(5), 1.0)  # the stop's savepoint
    assert state.final_step(pending_ids=(5,), draining=False) is FinalStep.UNDER_WAY
    state.handle(FinalCheckpointDropped(5), 2.0)  # the stop failed
    state.handle(FinalCheckpointDropped(None), 2.0)  # a drained stop never took it
    assert not state.is_final(5)
    state.handle(CheckpointCompleted(5), 3.0)
    assert not state.final_completed


def test_no_final_checkpoint_is_due_before_checkpointing_started() -> None:
    state = AttemptState(config(), now=0.0)
    assert sources_finish(state, 1.0) == []


# ------------------------------------------------------------------------ failures and blame


def test_a_slot_failure_blames_the_first_error_that_is_not_a_consequence() -> None:
    state = running()
    assert state.handle(failed(1, "ConnectionResetError: peer gone"), 5.0) == []
    assert state.phase is Phase.BLAMING
    assert state.handle(failed(0, "ValueError: bad record"), 5.1) == []
    assert state.handle(failed(1, "KeyError: later"), 5.2) == []
    commands = state.handle(Tick(), 5.0 + WINDOW_S)
    assert commands == [
        EndAttempt(
            AttemptOutcome.FAILED,
            Failure("slot 0 failed: ValueError: bad record", "traceback of slot 0"),
        )
    ]


def test_the_first_failure_is_blamed_when_every_one_is_a_consequence() -> None:
    state = running()
    state.handle(failed(1, "BrokenPipeError: x"), 5.0)
    state.handle(failed(0, "TaskCancelledError: y"), 5.1)
    assert failure(state.handle(Tick(), 6.0)).message == "slot 1 failed: BrokenPipeError: x"


def test_the_root_cause_is_chosen_only_when_the_window_closed() -> None:
    state = running()
    state.handle(failed(1, "EOFError"), 5.0)
    assert state.next_tick(5.1) == 5.0 + WINDOW_S
    assert state.handle(Tick(), 5.2) == []
    assert state.phase is Phase.BLAMING


def test_while_blaming_only_failures_of_this_attempt_count_and_all_else_is_dropped() -> None:
    state = running()
    state.handle(failed(1, "ConnectionResetError: a"), 5.0)
    dropped = feed(
        state,
        (5.1, Cancel()),
        (5.1, failed(0, "ValueError: zombie", attempt=ATTEMPT - 1)),
        (5.1, RunnerEnded(ATTEMPT, None)),
        (5.1, AcknowledgeCheckpoint(ATTEMPT, ("op", 0), 1)),
    )
    assert dropped == []
    assert failure(state.handle(Tick(), 6.0)).message == "slot 1 failed: ConnectionResetError: a"
    assert not state.runner_ended  # so the teardown still cancels the runner


def test_a_snapshot_request_while_blaming_is_routed_so_that_its_future_settles() -> None:
    state = running()
    state.handle(failed(1, "ConnectionResetError: a"), 5.0)
    request = SnapshotRequest(SnapshotKind.SAVEPOINT)
    assert state.handle(request, 5.1) == [RouteSnapshotRequest(request)]
    # routed even when the window closes with it: then the attempt fails right after
    late = SnapshotRequest(SnapshotKind.CHECKPOINT)
    commands = state.handle(late, 6.0)
    assert commands[0] == RouteSnapshotRequest(late)
    assert failure(commands[1:]).message == "slot 1 failed: ConnectionResetError: a"


def test_a_slot_that_cannot_load_the_job_fails_it_for_good() -> None:
    state = running()
    state.handle(failed(0, f"{LOAD_FAILURE}: ModuleNotFoundError: x"), 1.0)
    assert not failure(state.handle(Tick(), 2.0)).recoverable


def test_a_slot_that_does_not_see_the_shared_storage_fails_the_job_for_good() -> None:
    state = running()
    error = "tidegate.checkpoint.errors.StorageNotSharedError: the checkpoint directory /x is"
    state.handle(failed(0, error), 1.0)
    assert not failure(state.handle(Tick(), 2.0)).recoverable


def test_a_slot_failing_during_registration_is_blamed_too() -> None:
    state = AttemptState(config(), now=0.0)
    state.handle(register(0), 1.0)
    state.handle(failed(0, "ImportError: y"), 2.0)
    assert failure(state.handle(Tick(), 3.0)).message == "slot 0 failed: ImportError: y"


def test_a_lost_slot_fails_the_attempt_unless_it_had_finished() -> None:
    state = running()
    state.handle(SlotFinished(ATTEMPT, 0), 1.0)
    assert state.handle(SlotLost(ATTEMPT, 0), 1.5) == []
    commands = state.handle(SlotLost(ATTEMPT, 1), 2.0)
    assert failure(commands).message == (
        "slot 1 (pid 101 on worker) was lost: its worker process died"
    )


def test_the_coordinator_giving_up_fails_the_attempt_with_its_reason() -> None:
    state = running()
    commands = state.handle(FailJob(ATTEMPT, "too many failed checkpoints"), 1.0)
    assert failure(commands) == Failure("too many failed checkpoints")


def test_a_fenced_driver_keeps_its_checkpoints_and_fails_for_good() -> None:
    state = running()
    assert state.handle(Fenced(ATTEMPT, "generation 4 took over"), 1.0) == [
        KeepCheckpoints(),
        EndAttempt(
            AttemptOutcome.FAILED,
            Failure("FencedWriterError: generation 4 took over", recoverable=False),
        ),
    ]


def test_cancel_ends_the_attempt_canceled() -> None:
    for state in (AttemptState(config(), now=0.0), running()):
        assert state.handle(Cancel(), 1.0) == [EndAttempt(AttemptOutcome.CANCELED)]


# ----------------------------------------------------------------------- stop-with-savepoint


def test_a_failed_stop_is_settled_and_a_drained_one_restarts_the_job_freely() -> None:
    state = running()
    assert state.handle(StopFailed(ATTEMPT, "expired"), 1.0) == [SettleFailedStop("expired")]
    assert state.phase is Phase.RUNNING
    commands = state.handle(StopAfterDrainFailed("expired"), 1.0)
    assert commands[0] == RestartFreely()
    assert failure(commands).message == (
        "stop-with-savepoint --drain failed after the sources were drained (expired); "
        "restarting from the latest checkpoint or savepoint"
    )


# --------------------------------------------------------------------- the runner ending early


def test_the_slots_last_messages_after_the_runner_ended_still_finish_the_attempt() -> None:
    state = running()
    sources_finish(state, 1.0)
    state.handle(FinalCheckpointTriggered(7), 1.0)
    state.handle(CheckpointCompleted(7), 2.0)
    assert state.handle(RunnerEnded(ATTEMPT, None), 3.0) == []
    assert state.phase is Phase.DRAINING and state.next_tick(3.5) == 3.0 + GRACE_S
    commands = feed(state, (3.1, SlotFinished(ATTEMPT, 0)), (3.2, SlotFinished(ATTEMPT, 1)))
    assert commands == [JoinRunner(60.0), EndAttempt(AttemptOutcome.FINISHED)]


def test_a_runner_ending_early_fails_the_attempt_with_its_python_error_after_the_grace() -> None:
    state = running()
    error = RuntimeError("Py4JJavaError: ...\nValueError: boom in a worker\n\tat org.apache")
    feed(state, (3.0, RunnerEnded(ATTEMPT, error)), (4.0, RunnerEnded(ATTEMPT, error)))
    assert state.handle(Tick(), 3.0 + GRACE_S - 0.1) == []
    commands = state.handle(Tick(), 3.0 + GRACE_S)
    assert failure(commands).message == (
        "the slots' runner ended before the job finished: ValueError: boom in a worker"
    )


def test_while_draining_heartbeats_are_not_checked_but_messages_still_handled() -> None:
    state = running(now=0.0)
    state.handle(RunnerEnded(ATTEMPT, None), 9.0)
    metrics = SlotMetrics(ATTEMPT, 0, {})
    assert state.handle(metrics, 12.0) == [RouteMetrics(metrics)]
    assert state.handle(register(0, attempt=ATTEMPT - 1), 12.0) == [CancelLateSlot(ATTEMPT - 1, 0)]
    assert state.phase is Phase.DRAINING


def test_a_slot_failing_while_draining_is_blamed_as_usual() -> None:
    state = running()
    state.handle(RunnerEnded(ATTEMPT, RuntimeError("job aborted")), 1.0)
    state.handle(failed(1, "ConnectionResetError: a"), 1.5)
    state.handle(failed(0, "ZeroDivisionError: b"), 1.6)
    assert failure(state.handle(Tick(), 2.0)).message == "slot 0 failed: ZeroDivisionError: b"


def test_a_runner_failing_before_any_slot_registered_fails_the_attempt_sooner() -> None:
    state = AttemptState(config(), now=0.0)
    error = RuntimeError("PythonException: ...\nModuleNotFoundError: No module named 'x'\n")
    state.handle(RunnerEnded(ATTEMPT, error), 1.0)
    assert state.handle(Tick(), 1.0 + UNREGISTERED_GRACE_S - 0.01) == []
    assert failure(state.handle(Tick(), 1.0 + UNREGISTERED_GRACE_S)).message.startswith(
        "the slots' runner ended before the job finished: ModuleNotFoundError"
    )


def test_a_runner_ending_during_registration_never_sends_the_addresses() -> None:
    state = AttemptState(config(), now=0.0)
    state.handle(register(0), 1.0)
    commands = feed(state, (2.0, RunnerEnded(ATTEMPT, None)), (2.5, register(1)))
    assert commands == []
    assert failure(state.handle(Tick(), 7.0)).message == (
        "the slots' runner ended before the job finished"
    )


# ---------------------------------------------------------------------------------- teardown


def test_teardown_cancels_the_runner_unless_it_ended_and_stops_checkpointing_if_started() -> None:
    assert AttemptState(config(), now=0.0).handle(TearDown(), 1.0) == [
        CloseRequests(),
        CancelSlots("the job attempt ended"),
        CancelRunner(60.0),
    ]
    state = running()
    state.handle(RunnerEnded(ATTEMPT, None), 1.0)
    state.handle(Tick(), 10.0)
    assert state.handle(TearDown(), 11.0) == [
        StopCheckpointing("job attempt ended"),
        CloseRequests(),
        CancelSlots("the job attempt ended"),
    ]
    assert state.tearing_down


def test_events_after_the_outcome_change_nothing() -> None:
    state = running()
    state.handle(Cancel(), 1.0)
    for event in (failed(0, "ValueError"), Tick(), SourceFinished(ATTEMPT, ("src", 0)), Cancel()):
        assert state.handle(event, 100.0) == []
    assert state.phase is Phase.ENDED


# ------------------------------------------------------------------------ randomized invariants

EVENTS: list[Event] = [
    register(0),
    register(1),
    register(0, attempt=ATTEMPT - 1),
    SourceFinished(ATTEMPT, ("src", 0)),
    SourceFinished(ATTEMPT, ("src", 1)),
    SlotFinished(ATTEMPT, 0),
    SlotFinished(ATTEMPT, 1),
    SlotMetrics(ATTEMPT, 0, {}),
    SlotMetrics(ATTEMPT, 1, {}),
    failed(0, "ValueError: x"),
    failed(1, "EOFError"),
    SlotLost(ATTEMPT, 1),
    RunnerEnded(ATTEMPT, None),
    RetryFinalCheckpoint(ATTEMPT),
    FinalCheckpointTriggered(9),
    CheckpointCompleted(9),
    Cancel(),
    Tick(),
]


@pytest.mark.parametrize("seed", range(50))
def test_any_event_sequence_ends_the_attempt_at_most_once_and_last(seed: int) -> None:
    rng = random.Random(seed)
    state, now, ends = AttemptState(config(), now=0.0), 0.0, 0
    for _ in range(60):
        now += rng.choice((0.0, 0.1, 1.0, 4.0, 11.0))
        commands = state.handle(rng.choice(EVENTS), now)
        ended = [c for c in commands if isinstance(c, EndAttempt)]
        ends += len(ended)
        assert not ended or commands[-1] is ended[0]
        assert (state.phase is Phase.ENDED) == (ends == 1)
        if ends == 0:
            assert state.next_tick(now) > now or state.phase in (Phase.BLAMING, Phase.DRAINING)
    teardown = state.handle(TearDown(), now + 1)
    assert CloseRequests() in teardown and state.tearing_down
    assert (CancelRunner(60.0) in teardown) == (not state.runner_ended)

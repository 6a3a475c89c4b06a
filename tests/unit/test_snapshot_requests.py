"""How a job attempt serves the user's checkpoint, savepoint and stop-with-savepoint requests
(deploy/snapshot_requests.AttemptRequests), scripted against a recording RequestTarget: no
JobMaster, coordinator, process or socket."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

import pytest

from tidegate.checkpoint.errors import CheckpointTriggerError, JobNotRunningError
from tidegate.checkpoint.options import CheckpointOptions, CheckpointType
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.deploy.snapshot_requests import (
    AttemptRequests,
    PendingRequests,
    SnapshotKind,
    SnapshotRequest,
)


@dataclass
class Target:
    """A RequestTarget that records what it is asked to do; its answers are set by the test."""

    running: bool = True
    sources_done: bool = False
    dir_error: Exception | None = None
    trigger_error: Exception | None = None
    stopped: bool = False  # trigger returns None: checkpointing has stopped
    next_id: int = 10
    calls: list[tuple] = field(default_factory=list)

    def not_running_error(self) -> Exception | None:
        return None if self.running else JobNotRunningError("the job is CANCELLING")

    def sources_finished(self) -> bool:
        return self.sources_done

    def savepoint_location(self, request: SnapshotRequest) -> str:
        return f"{request.target_directory or '/sp'}/savepoint-1"

    def create_dir(self, location: str) -> None:
        self.calls.append(("create_dir", location))
        if self.dir_error is not None:
            raise self.dir_error

    def trigger(self, options: CheckpointOptions | None) -> int | None:
        self.calls.append(("trigger", options))
        if self.trigger_error is not None:
            raise self.trigger_error
        if self.stopped:
            return None
        self.next_id += 1
        return self.next_id

    def suspend_periodic(self) -> None:
        self.calls.append(("suspend",))

    def resume_periodic(self) -> None:
        self.calls.append(("resume",))

    def drain_sources(self) -> None:
        self.calls.append(("drain",))

    def set_final(self, checkpoint_id: int, final: bool) -> None:
        self.calls.append(("final", checkpoint_id, final))

    def stop_failed(self, reason: str) -> None:
        self.calls.append(("stop_failed", reason))


def _completed(
    checkpoint_id: int, path: str = "/sp/savepoint-1", savepoint: bool = True
) -> CompletedCheckpoint:
    return CompletedCheckpoint(checkpoint_id, 0, 1, 1, path, 10, is_savepoint=savepoint)


def _savepoint(location: str, final: bool) -> CheckpointOptions:
    return CheckpointOptions(
        checkpoint_type=CheckpointType.SAVEPOINT, is_final=final, target_location=location
    )


def test_a_checkpoint_request_triggers_with_the_configured_options_and_settles_on_completion():
    target = Target()
    requests = AttemptRequests(target)
    request = SnapshotRequest(SnapshotKind.CHECKPOINT)
    requests.start(request)
    assert target.calls == [("trigger", None)]
    requests.completed(_completed(11, savepoint=False))
    assert request.future.result(timeout=0).checkpoint_id == 11


def test_a_savepoint_creates_its_directory_first_and_resolves_to_it():
    target = Target()
    requests = AttemptRequests(target)
    request = SnapshotRequest(SnapshotKind.SAVEPOINT, "/mine")
    requests.start(request)
    assert target.calls == [
        ("create_dir", "/mine/savepoint-1"),
        ("trigger", _savepoint("/mine/savepoint-1", final=False)),
    ]
    requests.completed(_completed(11, "/mine/savepoint-1"))
    assert request.future.result(timeout=0) == "/mine/savepoint-1"


def test_a_savepoint_directory_that_cannot_be_created_fails_the_request_before_any_trigger():
    target = Target(dir_error=PermissionError("read-only file system"))
    request = SnapshotRequest(SnapshotKind.SAVEPOINT, "/ro")
    AttemptRequests(target).start(request)
    with pytest.raises(CheckpointTriggerError) as e:
        request.future.result(timeout=0)
    assert "cannot create the savepoint directory /ro/savepoint-1" in str(e.value)
    assert "PermissionError: read-only file system" in str(e.value)
    assert [c[0] for c in target.calls] == ["create_dir"]


@pytest.mark.parametrize("kind", list(SnapshotKind))
def test_no_request_is_taken_while_the_job_does_not_run(kind):
    target = Target(running=False)
    request = SnapshotRequest(kind)
    AttemptRequests(target).start(request)
    with pytest.raises(JobNotRunningError, match="CANCELLING"):
        request.future.result(timeout=0)
    assert target.calls == []


def test_a_trigger_that_raises_fails_the_request_with_the_cause():
    target = Target(trigger_error=RuntimeError("storage unreachable"))
    request = SnapshotRequest(SnapshotKind.CHECKPOINT)
    AttemptRequests(target).start(request)
    with pytest.raises(CheckpointTriggerError, match="RuntimeError: storage unreachable"):
        request.future.result(timeout=0)


def test_a_trigger_after_checkpointing_stopped_fails_the_request_as_not_running():
    target = Target(stopped=True)
    request = SnapshotRequest(SnapshotKind.CHECKPOINT)
    AttemptRequests(target).start(request)
    with pytest.raises(JobNotRunningError, match="checkpointing has stopped"):
        request.future.result(timeout=0)


def test_stop_without_drain_suspends_periodic_checkpoints_and_triggers_a_final_savepoint():
    target = Target()
    requests = AttemptRequests(target)
    stop = SnapshotRequest(SnapshotKind.STOP)
    requests.start(stop)
    assert target.calls == [
        ("create_dir", "/sp/savepoint-1"),
        ("suspend",),
        ("trigger", _savepoint("/sp/savepoint-1", final=True)),
        ("final", 11, True),
    ]
    # its savepoint completing leaves it open: it succeeds when the job has finished
    assert requests.completed(_completed(11)) is stop
    assert not stop.future.done()


def test_stop_with_drain_waits_for_the_sources_before_triggering():
    target = Target()
    requests = AttemptRequests(target)
    stop = SnapshotRequest(SnapshotKind.STOP, drain=True)
    requests.start(stop)
    assert [c[0] for c in target.calls] == ["create_dir", "suspend", "drain"]
    assert requests.draining
    requests.trigger_drained()
    assert target.calls[-2:] == [
        ("trigger", _savepoint("/sp/savepoint-1", final=True)),
        ("final", 11, True),
    ]


def test_a_second_stop_or_any_request_during_a_stop_is_refused():
    target = Target()
    requests = AttemptRequests(target)
    requests.start(SnapshotRequest(SnapshotKind.STOP))
    other = SnapshotRequest(SnapshotKind.CHECKPOINT)
    requests.start(other)
    with pytest.raises(JobNotRunningError, match="stopping with a savepoint"):
        other.future.result(timeout=0)


def test_a_stop_after_every_source_finished_is_refused():
    target = Target(sources_done=True)
    stop = SnapshotRequest(SnapshotKind.STOP)
    AttemptRequests(target).start(stop)
    with pytest.raises(JobNotRunningError, match="finishing on its own"):
        stop.future.result(timeout=0)
    assert target.calls == []


@pytest.mark.parametrize("drain", [False, True])
def test_a_failed_stop_unmarks_its_savepoint_resumes_checkpoints_and_says_if_the_job_restarts(
    drain,
):
    target = Target()
    requests = AttemptRequests(target)
    stop = SnapshotRequest(SnapshotKind.STOP, drain=drain)
    requests.start(stop)
    if drain:
        requests.trigger_drained()
    assert requests.aborted(11, "declined by sink[0]")  # the JobMaster then settles the stop
    assert requests.stop_failed("declined by sink[0]") is drain
    assert target.calls[-2:] == [("final", 11, False), ("resume",)]
    with pytest.raises(CheckpointTriggerError, match=r"savepoint 11 failed \(declined by sink"):
        stop.future.result(timeout=0)  # the abort settled it first, saying why
    assert requests.stopping is None
    assert not requests.aborted(12, "expired")  # later aborts are not the stop's


def test_a_stop_whose_trigger_raises_reports_the_failed_stop_to_the_job_master():
    target = Target(trigger_error=OSError("no space left"))
    stop = SnapshotRequest(SnapshotKind.STOP)
    AttemptRequests(target).start(stop)
    assert target.calls[-1] == ("stop_failed", "it could not be triggered: OSError: no space left")
    with pytest.raises(CheckpointTriggerError, match="no space left"):
        stop.future.result(timeout=0)


def test_teardown_fails_every_open_request_but_the_completed_stop():
    target = Target()
    requests = AttemptRequests(target)
    open_checkpoint = SnapshotRequest(SnapshotKind.CHECKPOINT)
    requests.start(open_checkpoint)
    stop = SnapshotRequest(SnapshotKind.STOP)
    requests.start(stop)
    requests.completed(_completed(12))
    requests.teardown(completed_stop=stop)
    with pytest.raises(JobNotRunningError, match="ended before the snapshot completed"):
        open_checkpoint.future.result(timeout=0)
    assert not stop.future.done()


def test_teardown_fails_a_drain_whose_savepoint_was_never_triggered():
    requests = AttemptRequests(Target())
    stop = SnapshotRequest(SnapshotKind.STOP, drain=True)
    requests.start(stop)
    requests.teardown(completed_stop=None)
    with pytest.raises(JobNotRunningError):
        stop.future.result(timeout=0)


# ------------------------------------------------- the registry of requests by checkpoint id


def test_a_savepoint_request_resolves_to_its_directory_and_a_checkpoint_to_itself():
    requests = PendingRequests()
    savepoint = SnapshotRequest(SnapshotKind.SAVEPOINT)
    checkpoint = SnapshotRequest(SnapshotKind.CHECKPOINT)
    requests.register(5, savepoint)
    requests.register(6, checkpoint)
    requests.complete(_completed(5, "/snapshots/5"))
    requests.complete(_completed(6, savepoint=False))
    assert savepoint.future.result(timeout=0) == "/snapshots/5"
    assert checkpoint.future.result(timeout=0) == _completed(6, savepoint=False)


def test_an_abort_that_comes_before_the_request_is_registered_still_fails_it():
    requests = PendingRequests()
    requests.abort(7, "expired: not acknowledged within 10 ms by 1[0]")
    request = SnapshotRequest(SnapshotKind.SAVEPOINT)
    requests.register(7, request)
    with pytest.raises(CheckpointTriggerError, match=r"savepoint 7 failed \(expired: .*"):
        request.future.result(timeout=0)


def test_a_stop_request_stays_open_when_its_savepoint_completes():
    requests = PendingRequests()
    stop = SnapshotRequest(SnapshotKind.STOP)
    requests.register(3, stop)
    assert requests.complete(_completed(3)) is stop
    assert not stop.future.done()  # it succeeds once the job has finished


@pytest.mark.parametrize(
    ("kind", "drain", "says"),
    [
        (
            SnapshotKind.CHECKPOINT,
            False,
            "checkpoint 4 failed (declined: disk full). The job keeps",
        ),
        (SnapshotKind.SAVEPOINT, False, "its files were removed"),
        (SnapshotKind.STOP, False, "its sources resume and it keeps running"),
        (SnapshotKind.STOP, True, "restarts from its latest checkpoint or savepoint"),
    ],
)
def test_an_aborted_request_says_why_and_what_happens_to_the_job(kind, drain, says):
    request = SnapshotRequest(kind, drain=drain)
    request.fail_aborted(4, "declined: disk full")
    with pytest.raises(CheckpointTriggerError) as err:
        request.future.result(timeout=0)
    assert says in str(err.value)


def test_the_first_outcome_of_a_request_wins_and_leftovers_fail_on_teardown():
    requests = PendingRequests()
    done, left = SnapshotRequest(SnapshotKind.CHECKPOINT), SnapshotRequest(SnapshotKind.SAVEPOINT)
    requests.register(1, done)
    requests.register(2, left)
    requests.complete(_completed(1, savepoint=False))
    done.fail(RuntimeError("too late"))
    requests.fail_all(JobNotRunningError("the job attempt ended"))
    assert done.future.result(timeout=0) == _completed(1, savepoint=False)
    with pytest.raises(JobNotRunningError):
        left.future.result(timeout=0)


def test_requests_settle_safely_from_several_threads():
    requests = PendingRequests()
    futures: list[Future] = []
    for cid in range(200):
        request = SnapshotRequest(SnapshotKind.CHECKPOINT)
        futures.append(request.future)
        requests.register(cid, request)
    threads = [
        threading.Thread(target=lambda: [requests.abort(c, "expired") for c in range(200)]),
        threading.Thread(
            target=lambda: [requests.complete(_completed(c, savepoint=False)) for c in range(200)]
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(f.done() for f in futures)

"""`JobClient` and `JobExecutionResult` (PyFlink's shapes: status, cancel and result are
futures, as in PyFlink)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from tidegate.common.job_status import JobStatus


class JobExecutionException(RuntimeError):
    """The job failed (after the restart strategy gave up) or was cancelled."""

    def __init__(self, job_id: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id
        self.detail = detail


@dataclass(frozen=True)
class JobExecutionResult:
    job_id: str
    net_runtime_ms: int
    job_name: str

    def get_job_id(self) -> str:
        return self.job_id

    def get_net_runtime(self) -> int:
        return self.net_runtime_ms

    def get_job_name(self) -> str:
        return self.job_name

    def is_job_execution_result(self) -> bool:
        return True


def _done(value: Any) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


class JobClient:
    def __init__(self, jobmaster: Any) -> None:
        self._jm = jobmaster
        self._started = time.monotonic()
        self._result: Future = Future()
        self._thread = threading.Thread(target=self._run, name="tidegate-jobmaster", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._jm.run()
        jm = self._jm
        if jm.status is JobStatus.FINISHED:
            runtime = int((time.monotonic() - self._started) * 1000)
            self._result.set_result(JobExecutionResult(jm.job_id, runtime, jm.spec.job_name))
        else:
            error = jm.error
            message = (
                f"job {jm.spec.job_name!r} ({jm.job_id}) was cancelled"
                if jm.status is JobStatus.CANCELED
                else f"job {jm.spec.job_name!r} ({jm.job_id}) failed: "
                f"{error if error else 'unknown error'}"
            )
            self._result.set_exception(
                JobExecutionException(jm.job_id, message, getattr(error, "detail", ""))
            )

    @property
    def jobmaster(self) -> Any:
        """The JobMaster (for live statistics: `client.jobmaster.stats`)."""
        return self._jm

    def get_job_id(self) -> str:
        return self._jm.job_id

    def get_job_status(self) -> Future:
        return _done(self._jm.status)

    def cancel(self) -> Future:
        self._jm.cancel()
        f: Future = Future()

        def wait() -> None:
            self._jm.done.wait()
            f.set_result(None)

        threading.Thread(target=wait, daemon=True).start()
        return f

    def get_job_execution_result(self) -> Future:
        return self._result

    def trigger_savepoint(self, savepoint_directory: str | None = None) -> Future:
        """Take a savepoint; the Future holds the savepoint directory's path. A new directory
        `savepoint-<job id prefix>-<random>` is made under `savepoint_directory` (default: the
        configured default savepoint directory). The job keeps running; a failed savepoint
        fails the Future (with the reason), never the job."""
        return self._jm.trigger_savepoint(savepoint_directory)

    def stop_with_savepoint(
        self, advance_to_end_of_event_time: bool = False, savepoint_directory: str | None = None
    ) -> Future:
        """Stop the job with a savepoint; the Future holds the savepoint directory's path once
        the job has FINISHED. `advance_to_end_of_event_time` drains first: the sources end
        their input as if bounded and every operator flushes before the savepoint. If the
        savepoint fails, the job keeps running and the Future fails with the reason."""
        return self._jm.stop_with_savepoint(savepoint_directory, drain=advance_to_end_of_event_time)

    def trigger_checkpoint(self) -> Future:
        """Take a checkpoint now; the Future holds the CompletedCheckpoint (`checkpoint_id`,
        `path`, `size_bytes`, ...)."""
        return self._jm.trigger_checkpoint()

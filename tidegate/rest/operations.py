"""Asynchronous operations of the REST API (Flink's trigger ids): a triggered checkpoint,
savepoint or stop-with-savepoint gets a request id; its status is polled until the JobMaster's
future completes."""

from __future__ import annotations

import enum
import secrets
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

#: operations remembered (the oldest are forgotten first)
MAX_OPERATIONS = 1000


class OperationKind(enum.Enum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"
    STOP = "stop"


@dataclass(frozen=True)
class Operation:
    job_id: str
    kind: OperationKind
    #: holds a CompletedCheckpoint (checkpoint) or the savepoint directory's path
    future: Future

    def to_json(self) -> dict[str, Any]:
        """Flink's async-operation result: IN_PROGRESS, or COMPLETED with the operation's
        result (`checkpointId`, or `location`) or its `failure-cause`."""
        if not self.future.done():
            return {"status": {"id": "IN_PROGRESS"}}
        if self.future.cancelled():
            return _failed("CancelledError", "the operation was cancelled")
        error = self.future.exception()
        if error is not None:
            return _failed(type(error).__name__, str(error))
        result = self.future.result()
        if self.kind is OperationKind.CHECKPOINT:
            operation = {"checkpointId": result.checkpoint_id, "location": result.path}
        else:
            operation = {"location": str(result)}
        return {"status": {"id": "COMPLETED"}, "operation": operation}


def _failed(name: str, message: str) -> dict[str, Any]:
    return {
        "status": {"id": "COMPLETED"},
        "operation": {"failure-cause": {"class": name, "message": message}},
    }


class Operations:
    """Operations by request id. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._operations: OrderedDict[str, Operation] = OrderedDict()

    def add(self, job_id: str, kind: OperationKind, future: Future) -> str:
        request_id = secrets.token_hex(16)
        with self._lock:
            self._operations[request_id] = Operation(job_id, kind, future)
            while len(self._operations) > MAX_OPERATIONS:
                self._operations.popitem(last=False)
        return request_id

    def get(self, job_id: str, request_id: str) -> Operation | None:
        with self._lock:
            operation = self._operations.get(request_id)
        return operation if operation is not None and operation.job_id == job_id else None

"""The optional connector contracts the operators honour: a CheckpointListeningReader is told
the splits of each completed checkpoint (not of subsumed ones), a UsesJobId sink is bound to
the running job and a UsesOperatorUid sink to its operator's uid before its writer exists,
and a committer's close is called."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tidegate.connectors.base import Boundedness
from tidegate.runtime.connector_operators import SinkOperator, SourceOperator
from tidegate.runtime.operators import OperatorRuntime


class Collector:
    def __init__(self) -> None:
        self.records: list[Any] = []

    def collect_batch(self, records: list[Any]) -> None:
        self.records.extend(records)

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class ListeningReader:
    def __init__(self) -> None:
        self.position = 0
        self.notified: list[tuple[int, list[int]]] = []

    def poll_batch(self, max_records: int) -> list[int]:
        self.position += 1
        return [self.position]

    def snapshot_splits(self) -> list[int]:
        return [self.position]

    def notify_checkpoint_complete(self, checkpoint_id: int, splits: list[Any]) -> None:
        self.notified.append((checkpoint_id, splits))

    def close(self) -> None: ...


class ListeningSource:
    boundedness = Boundedness.CONTINUOUS_UNBOUNDED

    def __init__(self) -> None:
        self.reader = ListeningReader()

    def create_splits(self, parallelism: int) -> list[int]:
        return [0]

    def create_reader(self, splits: list[int], subtask_index: int, parallelism: int):
        return self.reader


def _runtime(job_id: str = "job-1") -> OperatorRuntime:
    return OperatorRuntime(0, 1, 128, 0, job_id=job_id)


def test_a_listening_reader_gets_the_splits_of_the_completed_checkpoint_only():
    source = ListeningSource()
    op = SourceOperator(source, uid="src")
    op.outputs = [Collector()]
    op.initialize_state(_runtime(), None)
    op.poll(1)
    op.snapshot_state(1, 0)
    op.poll(1)
    op.snapshot_state(2, 0)
    op.notify_checkpoint_complete(2)
    op.notify_checkpoint_complete(1)  # subsumed by 2: nothing
    assert source.reader.notified == [(2, [2])]


@dataclass
class Committer:
    committed: list[Any] = field(default_factory=list)
    closed: bool = False

    def commit(self, committables: list[Any]) -> None:
        self.committed.extend(committables)

    def close(self) -> None:
        self.closed = True


@dataclass(frozen=True)
class JobNamedSink:
    committer: Committer
    job_id: str = ""
    uid: str = ""

    def for_job(self, job_id: str) -> JobNamedSink:
        return replace(self, job_id=job_id)

    def for_uid(self, uid: str) -> JobNamedSink:
        return replace(self, uid=uid)

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> Any:
        assert self.job_id == "job-7", "the writer of a sink bound to its job"
        return self

    def write_batch(self, records: list[Any]) -> None: ...

    def close(self) -> None: ...

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        return [(self.job_id, self.uid, checkpoint_id)]

    def create_committer(self) -> Committer:
        return self.committer

    def recover(self, *args: Any) -> None: ...


def test_a_sink_using_the_job_id_and_uid_is_bound_to_the_running_job_and_its_operator():
    committer = Committer()
    op = SinkOperator(JobNamedSink(committer), uid="sink")
    op.initialize_state(_runtime("job-7"), None)
    op.snapshot_state(3, 0)
    op.notify_checkpoint_complete(3)
    op.close()
    assert committer.committed == [("job-7", "sink", 3)]
    assert committer.closed

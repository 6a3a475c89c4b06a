"""The optional connector contracts the operators honour: a CheckpointListeningReader is told
the splits of each completed checkpoint (not of subsumed ones), a UsesJobId sink is bound to
the running job and a UsesOperatorUid sink to its operator's uid before its writer exists,
and a committer's close is called, also when the writer's close fails or the task fails before
opening its operators."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pytest

from tests.support.tasks import task_environment
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.connectors.base import Boundedness
from tidegate.runtime.connector_operators import SinkOperator, SourceOperator
from tidegate.runtime.gate import InputGate
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.plan import OperatorSpec, VertexSpec
from tidegate.runtime.task import StreamTask


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


class Closing:
    """A reader, writer or committer that records its close (and may fail it)."""

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.closed = False

    def commit(self, committables: list[Any]) -> None: ...

    def close(self) -> None:
        self.closed = True
        if self.fails:
            raise OSError("close failed")


@dataclass(frozen=True)
class ClosingSink:
    writer: Closing
    committer: Closing
    recover_fails: bool = False

    def create_writer(self, subtask_index: int, parallelism: int, attempt: int) -> Closing:
        return self.writer

    def create_committer(self) -> Closing:
        return self.committer

    def recover(self, *args: Any) -> None:
        if self.recover_fails:
            raise ConnectionError("the sink's server is unreachable")


def test_a_sink_operator_closes_its_committer_although_its_writers_close_raises():
    writer, committer = Closing(fails=True), Closing()
    op = SinkOperator(ClosingSink(writer, committer), uid="sink")
    op.initialize_state(_runtime(), None)
    with pytest.raises(OSError, match="close failed"):
        op.close()
    assert writer.closed and committer.closed


def test_a_task_whose_operator_fails_to_start_releases_the_operators_started_before_it(tmp_path):
    """The source's reader (a connection) and the sink's committer are closed although the
    task never opened its operators: the sink's recover raised in the task's constructor."""
    reader, writer, committer = Closing(), Closing(), Closing()
    source = ListeningSource()
    source.reader = reader
    specs = (
        OperatorSpec(1, "src", "source", partial(SourceOperator, source), (2,), ()),
        OperatorSpec(
            2, "sink", "sink", partial(SinkOperator, ClosingSink(writer, committer, True)), (), ()
        ),
    )
    env = task_environment(CheckpointStorage(str(tmp_path / "chk"), "job"))
    vertex = VertexSpec(1, "chain", 1, specs, (), is_source=True)
    with pytest.raises(ConnectionError, match="unreachable"):
        StreamTask(
            env=env, vertex=vertex, subtask=0, gate=InputGate(10), writers={},
            num_channels=0, restored=None,
        )  # fmt: skip
    assert reader.closed and committer.closed
    assert not writer.closed  # never created

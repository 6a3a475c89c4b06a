"""The source operator with a SplitAssigningSource (connectors/base.py): splits in union
state, each reader choosing its own out of all of them, record timestamps from the reader, and
notify_checkpoint_complete reaching the reader. A fake source of in-memory "partitions"."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import pytest

from tidegate.checkpoint.assignment import redistribute_operator_state
from tidegate.connectors.base import Boundedness, SplitAssigningSource, TimestampedRecords
from tidegate.runtime.connector_operators import SourceOperator
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.records import TimestampedBatch
from tidegate.runtime.restore import RestoredOperatorState

SIZES = [5, 9, 3, 7, 4]  # records per partition


@dataclass(frozen=True)
class Part:
    index: int
    position: int = 0


class Partitions:
    boundedness = Boundedness.BOUNDED

    def create_splits(self, parallelism):
        return [Part(i) for i in range(len(SIZES))]

    def create_reader(self, splits, subtask_index, parallelism):
        raise AssertionError("a SplitAssigningSource's reader comes from create_reader_for")

    def create_reader_for(self, all_splits, subtask_index, parallelism):
        mine = {s.index: s for s in all_splits if s.index % parallelism == subtask_index}
        return Reader(sorted(mine.values(), key=lambda s: s.index))


class Reader:
    def __init__(self, splits):
        self.splits = splits
        self.notified: list[int] = []

    def poll_batch(self, max_records):
        for i, s in enumerate(self.splits):
            if s.position < SIZES[s.index]:
                end = min(SIZES[s.index], s.position + max_records)
                values = [(s.index, p) for p in range(s.position, end)]
                self.splits[i] = replace(s, position=end)
                return TimestampedRecords(values, [1000 * s.index + p for _, p in values])
        return None

    def snapshot_splits(self):
        return list(self.splits)  # finished ones too

    def notify_checkpoint_complete(self, checkpoint_id, splits):
        self.notified.append(checkpoint_id)

    def close(self):
        pass


class Collector:
    def __init__(self):
        self.batches: list = []

    def process_batch(self, records):
        self.batches.append(records)


def _open(parallelism, restored):
    ops = []
    for i in range(parallelism):
        op = SourceOperator(Partitions(), uid="src")
        op.outputs = [Collector()]
        runtime = OperatorRuntime(i, parallelism, 128, 0, restored is not None)
        op.initialize_state(runtime, restored and restored[i])
        ops.append(op)
    return ops


def test_the_fake_source_is_split_assigning():
    assert isinstance(Partitions(), SplitAssigningSource)


@pytest.mark.parametrize(("old", "new"), [(2, 3), (3, 2), (1, 4)])
def test_every_record_is_read_once_across_a_rescale_with_its_timestamp(old, new):
    first = _open(old, None)
    for op in first:
        op.poll(2)
    snapshots = [op.snapshot_state(1, 0).operator for op in first]
    shares = redistribute_operator_state(snapshots, new)
    second = _open(new, [RestoredOperatorState((), share) for share in shares])
    for op in second:
        while op.poll(3) is not None:
            pass
    batches = [b for op in first + second for b in op.outputs[0].batches]
    assert all(type(b) is TimestampedBatch for b in batches)
    read = Counter(v for b in batches for v in b)
    assert read == Counter((i, p) for i, n in enumerate(SIZES) for p in range(n))
    assert all(
        t == 1000 * i + p for b in batches for (i, p), t in zip(b, b.timestamps, strict=True)
    )


def test_a_completed_checkpoint_reaches_the_reader():
    (op,) = _open(1, None)
    op.snapshot_state(4, 0)
    op.notify_checkpoint_complete(4)
    assert op.reader.notified == [4]

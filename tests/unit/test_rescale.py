"""Rescaling, without Spark: the real source and sink operators snapshot at parallelism A, their
operator state is redistributed as a restore does (`redistribute_operator_state`), and new
operators at parallelism B restore it. Every source record is read exactly once; every
pre-committed sink file is committed exactly once, by one subtask, and leftovers of every old
writer index are removed, also while the new subtasks recover concurrently."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tidegate.checkpoint.assignment import redistribute_operator_state
from tidegate.common import Encoder
from tidegate.connectors.base import writer_subtask
from tidegate.connectors.collection import CollectionSource
from tidegate.connectors.datagen import DataGeneratorSource
from tidegate.connectors.file_sink import BucketAssigner, FileSink, RollingPolicy
from tidegate.connectors.file_source import FileSource, StreamFormat
from tidegate.connectors.number_seq import NumberSequenceSource
from tidegate.runtime.connector_operators import SinkOperator, SourceOperator
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.restore import RestoredOperatorState

TRANSITIONS = [(1, 2), (2, 3), (3, 7), (4, 8), (2, 1), (3, 2), (7, 3), (8, 4)]


class Collector:
    def __init__(self) -> None:
        self.records: list[Any] = []

    def process_batch(self, records: list) -> None:
        self.records.extend(records)


def _runtime(index: int, parallelism: int, attempt: int, restored: bool) -> OperatorRuntime:
    return OperatorRuntime(index, parallelism, 128, attempt, restored)


def _rescaled(snapshots: list[dict | None], parallelism: int) -> list[RestoredOperatorState]:
    """What a restore at `parallelism` hands each new subtask (plan_restore's operator state)."""
    shares = redistribute_operator_state([s or {} for s in snapshots], parallelism)
    return [RestoredOperatorState((), share) for share in shares]


# --- sources ----------------------------------------------------------------------------------


def _sources(tmp_path: Path) -> dict[str, tuple[Any, list[Any]]]:
    files = []
    for i in range(5):
        path = tmp_path / f"in-{i}.txt"
        path.write_text("".join(f"f{i}-{j}\n" for j in range(7 * i + 3)))
        files.append(str(path))
    lines = [f"f{i}-{j}" for i in range(5) for j in range(7 * i + 3)]
    return {
        "number-sequence": (NumberSequenceSource(0, 499), list(range(500))),
        "datagen": (DataGeneratorSource(lambda i: i, count=500), list(range(500))),
        "file": (FileSource(StreamFormat.text_line_format(), tuple(files)), lines),
        "collection": (CollectionSource(range(50)), list(range(50))),
    }


def _open_sources(source, parallelism, restored: list[RestoredOperatorState] | None):
    ops = []
    for i in range(parallelism):
        op = SourceOperator(source, uid="src")
        op.outputs = [Collector()]
        op.initialize_state(
            _runtime(i, parallelism, 0, restored is not None), restored and restored[i]
        )
        ops.append(op)
    return ops


@pytest.mark.parametrize("kind", ["number-sequence", "datagen", "file", "collection"])
@pytest.mark.parametrize(("old", "new"), TRANSITIONS, ids=[f"{a}to{b}" for a, b in TRANSITIONS])
def test_a_rescaled_source_reads_every_record_exactly_once(tmp_path, kind, old, new) -> None:
    source, expected = _sources(tmp_path)[kind]
    first = _open_sources(source, old, None)
    for op in first:  # part of the input, unevenly: some readers finish, others are midway
        for _ in range(op.ctx.subtask_index % 3 + 1):
            op.poll(7)
    snapshots = [op.snapshot_state(1, 0).operator for op in first]
    second = _open_sources(source, new, _rescaled(snapshots, new))
    for op in second:  # readers without a split finish at once; others may hold several
        while op.poll(11) is not None:
            pass
    read = [r for op in first + second for r in op.outputs[0].records]
    assert Counter(read) == Counter(expected)


def test_unbounded_datagen_splits_keep_their_stride_across_a_rescale() -> None:
    source = DataGeneratorSource(lambda i: i)
    first = _open_sources(source, 3, None)
    for op in first:
        op.poll(5)
    second = _open_sources(
        source, 2, _rescaled([op.snapshot_state(1, 0).operator for op in first], 2)
    )
    for op in second:
        for _ in range(6):  # 3 splits over 2 readers: one reader alternates between two
            op.poll(5)
    read = sorted(r for op in first + second for r in op.outputs[0].records)
    assert len(read) == len(set(read)) == 15 + 60
    assert read[:15] == list(range(15))


# --- the FileSink ------------------------------------------------------------------------------


def _sink(base: Path) -> FileSink:
    return (
        FileSink.for_row_format(str(base), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )


def _visible_lines(base: Path) -> list[str]:
    return [
        line
        for p in sorted(base.iterdir())
        if p.is_file() and not p.name.startswith(".")
        for line in p.read_text().splitlines()
    ]


def _hidden(base: Path) -> list[str]:
    return sorted(p.name for p in base.iterdir() if p.name.startswith("."))


def _restore_sinks_concurrently(sink, parallelism, attempt, restored) -> list[SinkOperator]:
    """Every new sink subtask recovers on its own thread at the same time (as slots do)."""
    ops = [SinkOperator(sink, uid="sink") for _ in range(parallelism)]
    start = threading.Barrier(parallelism)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        start.wait()
        try:
            ops[i].initialize_state(_runtime(i, parallelism, attempt, True), restored[i])
        except BaseException as e:  # reported below, on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(parallelism)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return ops


@pytest.mark.parametrize(("old", "new"), TRANSITIONS, ids=[f"{a}to{b}" for a, b in TRANSITIONS])
def test_a_rescaled_file_sink_commits_each_restored_file_once_and_cleans_every_leftover(
    tmp_path, old, new
) -> None:
    base = tmp_path / "out"
    sink = _sink(base)
    # Attempt 3 at `old`: checkpoint 7 pre-commits a file per subtask (completed, but the job
    # fails before notifying); checkpoint 8 pre-commits more (never completes); then a file
    # stays open. Earlier attempts left stale in-progress files too.
    for i in range(old):
        stale = sink.create_writer(i, old, 1)
        stale.write_batch([f"stale-{i}"])
        stale.close()
    first = [SinkOperator(sink, uid="sink") for _ in range(old)]
    for i, op in enumerate(first):
        op.initialize_state(_runtime(i, old, 3, False), None)
        op.process_batch([f"checkpointed-{i}-{j}" for j in range(3)])
    snapshots = [op.snapshot_state(7, 0).operator for op in first]
    for i, op in enumerate(first):
        op.process_batch([f"uncommitted-{i}"])
        op.snapshot_state(8, 0)
        op.process_batch([f"open-{i}"])
        op.close()
    assert _visible_lines(base) == []

    second = _restore_sinks_concurrently(sink, new, 4, _rescaled(snapshots, new))

    expected = [f"checkpointed-{i}-{j}" for i in range(old) for j in range(3)]
    assert sorted(_visible_lines(base)) == sorted(expected)
    assert _hidden(base) == []  # every leftover of every old writer index is gone
    for i, op in enumerate(second):
        op.process_batch([f"new-{i}"])
        op.snapshot_state(9, 0)
        op.notify_checkpoint_complete(9)
    assert sorted(_visible_lines(base)) == sorted(expected + [f"new-{i}" for i in range(new)])


def test_restored_committables_go_to_the_subtask_that_takes_over_their_writer_index(tmp_path):
    sink = _sink(tmp_path / "out")
    first = [SinkOperator(sink, uid="sink") for _ in range(5)]
    for i, op in enumerate(first):
        op.initialize_state(_runtime(i, 5, 0, False), None)
        op.process_batch([f"r{i}"])
    restored = _rescaled([op.snapshot_state(1, 0).operator for op in first], 2)
    for op in first:
        op.close()
    committed: dict[int, list[str]] = {}
    for i in range(2):
        op = SinkOperator(sink, uid="sink")
        op.initialize_state(_runtime(i, 2, 1, True), restored[i])
        visible = [p.name for p in (tmp_path / "out").iterdir() if p.name[0] != "."]
        committed[i] = sorted(name.split("-")[1] for name in visible)
    # new subtask 0 commits the files of writers 0, 2, 4; subtask 1 then adds 1 and 3
    assert committed == {0: ["0", "2", "4"], 1: ["0", "1", "2", "3", "4"]}


def test_writer_indexes_are_taken_over_by_their_own_subtask_or_modulo_after_a_scale_down():
    assert [writer_subtask(k, 4) for k in range(4)] == [0, 1, 2, 3]
    assert [writer_subtask(k, 3) for k in range(8)] == [0, 1, 2, 0, 1, 2, 0, 1]
    with pytest.raises(ValueError):
        writer_subtask(0, 0)

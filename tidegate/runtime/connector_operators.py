"""Operators that wrap connectors: the source operator (head of a source vertex, polled by the
task loop) and the two-phase-commit sink operator."""

from __future__ import annotations

from typing import Any

from tidegate.connectors.base import (
    CheckpointListeningReader,
    SplitAssigningSource,
    SplitReportingReader,
    UsesJobId,
    UsesOperatorUid,
    writer_subtask,
)
from tidegate.runtime import faults
from tidegate.runtime.operators import OperatorRuntime, StreamOperator
from tidegate.runtime.records import TimestampedBatch
from tidegate.runtime.timestamps import WatermarkGeneration
from tidegate.state.descriptors import ListStateDescriptor


class SourceOperator(StreamOperator):
    """Reads splits; its position is the list of splits it holds, kept in operator list state
    (so restore resumes exactly and a rescale redistributes splits). A SplitAssigningSource's
    splits are union list state instead, and its readers choose their own (connectors/base.py).

    With a WatermarkStrategy, records get their timestamps here and the source subtask emits
    watermarks (runtime/timestamps.py); its last watermark is checkpointed with its state. A
    SplitReportingReader gets one watermark generator per split (runtime/split_watermarks.py):
    the subtask's watermark follows its slowest split that is not idle."""

    SPLITS = "__splits__"
    stores_watermark = True  # its last emitted watermark (nothing without a strategy)

    def __init__(
        self,
        source: Any,
        watermark_strategy: Any = None,
        watermark_interval_ms: Any = 200,
        **kw,
    ) -> None:
        super().__init__(None, **kw)
        self.source = source
        self.reader = None
        self.watermark_strategy = watermark_strategy
        self.watermark_interval_ms = watermark_interval_ms
        self.watermarks: WatermarkGeneration | None = None
        #: checkpoint id -> the splits snapshotted for it, for a CheckpointListeningReader
        self._snapshots: dict[int, list] = {}

    def initialize_state(self, runtime: OperatorRuntime, restored: Any | None) -> None:
        super().initialize_state(runtime, restored)
        assigning = isinstance(self.source, SplitAssigningSource)
        if assigning:
            self._splits_state = self.operator_state.get_union_list_state(
                ListStateDescriptor(self.SPLITS)
            )
        else:
            self._splits_state = self.operator_state.get_list_state(
                ListStateDescriptor(self.SPLITS)
            )
        if assigning:
            all_splits = (
                list(self._splits_state.get())
                if restored is not None
                else self.source.create_splits(runtime.parallelism)
            )
            self.reader = self.source.create_reader_for(
                all_splits, runtime.subtask_index, runtime.parallelism
            )
            return
        if restored is not None:
            splits = list(self._splits_state.get())
        else:
            all_splits = self.source.create_splits(runtime.parallelism)
            splits = all_splits[runtime.subtask_index :: runtime.parallelism]
        self.reader = self.source.create_reader(splits, runtime.subtask_index, runtime.parallelism)

    def open(self) -> None:
        super().open()
        strategy = self.watermark_strategy
        if strategy is not None and (
            strategy.generates_watermarks or strategy.timestamp_assigner is not None
        ):
            split_aware = isinstance(self.reader, SplitReportingReader)
            self.watermarks = wg = WatermarkGeneration(
                strategy, self, self.watermark_interval_ms, split_aware
            )
            if wg.splits is not None:
                self.reader.report_splits(wg.splits)

    def poll(self, max_records: int) -> list | None:
        """Emit the next batch; returns it (None when the reader is finished)."""
        batch = self.reader.poll_batch(max_records)
        runs = None
        if batch and type(batch) is not list and type(batch) is not TimestampedBatch:
            # a reader's TimestampedRecords or SplitRecords
            runs = getattr(batch, "split_runs", None)
            timestamps = batch.timestamps
            batch = list(batch) if timestamps is None else TimestampedBatch(batch, timestamps)
        if batch:
            wg = self.watermarks
            if wg is None:
                self.emit(batch)
            else:
                wg.before_records()
                self.emit(wg.assign(batch, runs))
                wg.flush()
        return batch

    def snapshot_state(self, checkpoint_id: int, timestamp_ms: int, savepoint: bool = False):
        splits = self.reader.snapshot_splits()
        self._splits_state.update(splits)
        if isinstance(self.reader, CheckpointListeningReader):
            self._snapshots[checkpoint_id] = list(splits)
        return super().snapshot_state(checkpoint_id, timestamp_ms, savepoint)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        super().notify_checkpoint_complete(checkpoint_id)
        splits = self._snapshots.pop(checkpoint_id, None)
        for older in [cid for cid in self._snapshots if cid < checkpoint_id]:
            del self._snapshots[older]  # subsumed
        if splits is not None:
            self.reader.notify_checkpoint_complete(checkpoint_id, splits)

    def process_batch(self, records: list) -> None:
        raise RuntimeError("a source operator has no input")

    def discard(self) -> None:
        try:
            if self.reader is not None:
                self.reader.close()
        finally:
            super().discard()


class SinkOperator(StreamOperator):
    """Two-phase commit around a `Sink` (DESIGN §2 step 5):

    1. records go to the writer;
    2. in the synchronous phase of checkpoint n the writer pre-commits, and the committables are
       stored in this operator's state with n and this subtask's index (the writer index);
    3. on notify_checkpoint_complete(n) every committable of a checkpoint <= n is committed;
    4. after a restore, the restored committables of the writer indexes this subtask takes over
       (`writer_subtask`: its own, plus vanished ones after a scale-down) are committed before
       new records are written, and leftovers of failed attempts are removed (`Sink.recover`).

    The committables are union list state, so every subtask sees all of them on restore and
    keeps those of its writer indexes: whatever the new parallelism, the files of one old
    writer are committed or cleaned up by one new subtask only (no race between subtasks).
    """

    COMMITTABLES = "__sink_committables__"

    def __init__(self, sink: Any, **kw) -> None:
        super().__init__(None, **kw)
        self.sink = sink
        self.writer = None
        self.committer = None
        self.pending: list[tuple[int, Any]] = []

    def initialize_state(self, runtime: OperatorRuntime, restored: Any | None) -> None:
        super().initialize_state(runtime, restored)
        self._state = self.operator_state.get_union_list_state(
            ListStateDescriptor(self.COMMITTABLES)
        )
        if isinstance(self.sink, UsesOperatorUid):
            self.sink = self.sink.for_uid(self.uid)
        if isinstance(self.sink, UsesJobId):
            self.sink = self.sink.for_job(runtime.job_id)
        index, parallelism = runtime.subtask_index, runtime.parallelism
        committables = [
            c
            for writer, _cid, c in self._state.get()
            if writer_subtask(writer, parallelism) == index
        ]
        self.committer = self.sink.create_committer()
        self.sink.recover(index, parallelism, runtime.attempt, committables)
        if committables:
            self.committer.commit(committables)
        self._state.clear()
        self.writer = self.sink.create_writer(index, parallelism, runtime.attempt)

    def process_batch(self, records: list) -> None:
        self.writer.write_batch(records)

    def snapshot_state(self, checkpoint_id: int, timestamp_ms: int, savepoint: bool = False):
        for c in self.writer.prepare_commit(checkpoint_id):
            self.pending.append((checkpoint_id, c))
        index = self.ctx.subtask_index
        self._state.update([(index, cid, c) for cid, c in self.pending])
        return super().snapshot_state(checkpoint_id, timestamp_ms, savepoint)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        ready = [c for cid, c in self.pending if cid <= checkpoint_id]
        if ready:
            faults.reach(faults.Site.COMMIT, checkpoint_id)
            self.committer.commit(ready)
            self.pending = [(cid, c) for cid, c in self.pending if cid > checkpoint_id]

    def discard(self) -> None:
        """Close the writer and the committer (one failing to close does not keep the other
        open), also after a failed `initialize_state` (a restored commit that raised)."""
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            try:
                if hasattr(self.committer, "close"):  # a committer holding a connection
                    self.committer.close()
            finally:
                super().discard()

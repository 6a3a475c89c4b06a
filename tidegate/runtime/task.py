"""StreamTask: runs one subtask (an operator chain) on one thread — the mailbox loop.

A source task alternates between its mailbox (control messages) and polling its reader.
Any other task reads its input gate: record batches go through the chain; events go to the
barrier handler (runtime/barriers.py), whose actions the task carries out. Frames of a blocked
channel are stashed and replayed, in order, once the channel is unblocked.

Unaligned checkpoints: the snapshot is taken as soon as the driver's trigger (or the first
barrier) arrives, and the input gate records each channel's frames up to its barrier
(runtime/inflight.py). The state files are written once every such channel delivered its
barrier; the recorded frames go into a channel-state file, replayed before new input on restore.

Event time: Watermark / WatermarkStatus events go to the subtask's StatusWatermarkValve
(runtime/watermarks.py); when the input watermark advances, the chain head's
`process_watermark` runs (timers fire, the watermark is forwarded along the chain and
downstream). Watermark generators in the chain emit periodically (runtime/timestamps.py). The
end of the input advances the chain to MAX_WATERMARK before operators finish.

A task ends only after the *final* checkpoint (taken once every source finished) completed,
so that two-phase-commit sinks have committed everything (FLIP-147).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import deque
from typing import Any

from tidegate.checkpoint.options import CheckpointOptions
from tidegate.runtime import faults, two_input
from tidegate.runtime.barriers import (
    AbortCheckpoint,
    SingleCheckpointBarrierHandler,
    TrackingBarrierHandler,
    TriggerCheckpoint,
    Unblock,
)
from tidegate.runtime.buffer_timeout import BufferTimeout
from tidegate.runtime.connector_operators import SourceOperator
from tidegate.runtime.events import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartition,
    Watermark,
    WatermarkStatus,
)
from tidegate.runtime.gate import ChannelStateCaptured, InputGate, TaskCancelledError
from tidegate.runtime.internal_timers import MAX_WATERMARK
from tidegate.runtime.mailbox import Mail, TaskMailbox
from tidegate.runtime.messages import (
    AcknowledgeCheckpoint,
    CancelSlot,
    DeclineCheckpoint,
    DrainSources,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    SourceFinished,
)
from tidegate.runtime.messages import (
    TriggerCheckpoint as TriggerMessage,
)
from tidegate.runtime.network import RecordWriter
from tidegate.runtime.operators import OperatorRuntime, OperatorSnapshot
from tidegate.runtime.plan import VertexSpec
from tidegate.runtime.restore import CHANNEL_STATE_KEY, RestoredChannelState
from tidegate.runtime.snapshot_writer import write_snapshot
from tidegate.runtime.task_environment import TaskEnvironment
from tidegate.runtime.timer_service import ChainTimers
from tidegate.runtime.timestamps import PeriodicWatermarks
from tidegate.runtime.watermarks import StatusWatermarkValve, ValveOutput

log = logging.getLogger(__name__)


class StreamTask:
    def __init__(
        self,
        *,
        env: TaskEnvironment,
        vertex: VertexSpec,
        subtask: int,
        gate: InputGate,
        writers: dict[int, RecordWriter],
        num_channels: int,
        channel_inputs: tuple[int, ...] = (),
        restored: dict[str, Any] | None,
    ) -> None:
        """Creates the operator chain and restores its state (`restored`: operator uid ->
        RestoredOperatorState, and the channel state of an unaligned checkpoint)."""
        self.env = env
        self.vertex = vertex
        self.subtask = subtask
        self.subtask_id = (vertex.vertex_id, subtask)
        #: Flink's name of the subtask, e.g. "Map (2/4)"
        self.name = f"{vertex.name} ({subtask + 1}/{vertex.parallelism})"
        self.attempt = env.attempt
        self.gate = gate
        self.writers = list(writers.values())
        self.control = env.control
        self.local_state = env.local_state
        self.batch_size = env.batch_size
        self.buffer_timeout = BufferTimeout(env.buffer_timeout_s)
        handler_cls = SingleCheckpointBarrierHandler if env.exactly_once else TrackingBarrierHandler
        self.handler = handler_cls(num_channels) if num_channels else None
        self.open_channels = num_channels
        self.valve = StatusWatermarkValve(num_channels)
        self.stash: list[deque] = [deque() for _ in range(num_channels)]
        self.replay: deque = deque()
        self.end_of_data: set[int] = set()
        self.final_checkpoint_id: int | None = None
        self.final_notified = False
        #: stop-with-savepoint --drain: end the input as if the source were bounded
        self.draining = False
        self.records_in = 0
        #: seconds spent waiting for input (metrics: idle time)
        self.idle_s = 0.0
        self._last_flush = time.monotonic()
        self._first_barrier: dict[int, tuple[float, int]] = {}
        #: unaligned checkpoints snapshotted but still recording in-flight frames
        self._unaligned: dict[int, tuple[list, float, tuple[float, float]]] = {}

        self.ops = self._create_chain(writers)
        #: process(channel, batch) of a two-input head (None: one input, process_batch)
        self._two_input = two_input.input_dispatch(self.ops[0], channel_inputs)
        self._restore(restored or {})

    def _create_chain(self, writers: dict[int, RecordWriter]) -> list[Any]:
        """The vertex's operators, each wired to its chained successors and network writers."""
        vertex = self.vertex
        ops = {spec.op_id: spec.factory() for spec in vertex.operators}
        for spec in vertex.operators:
            op = ops[spec.op_id]
            op.uid, op.name = spec.uid, spec.name
            op.outputs = [ops[i] for i in spec.chained_outputs] + [
                writers[e] for e in spec.network_outputs
            ]
        return [ops[spec.op_id] for spec in vertex.operators]

    def _restore(self, restored: dict[str, Any]) -> None:
        env = self.env
        runtime = OperatorRuntime(
            self.subtask,
            self.vertex.parallelism,
            env.max_parallelism,
            env.attempt,
            env.is_restored or bool(restored),
            env.local_state,
            state_backend=env.state_backend,
            job_id=env.job_id,
            batch=env.batch,
            mailbox=TaskMailbox(self.gate),
            job_parameters=env.job_parameters,
            filesystems=env.storage.filesystems,
        )
        initialized: list[Any] = []
        try:
            for op in self.ops:
                initialized.append(op)  # (a failing initialize_state may hold something)
                op.initialize_state(runtime, restored.get(op.uid))
        except BaseException:
            for op in reversed(initialized):  # no connection or file stays open
                try:
                    op.discard()
                except Exception:
                    log.exception("could not release operator %s after a failed start", op.name)
            raise
        local, remote = self.restored_files
        if env.local_state is not None and local + remote:
            log.info(
                "restored keyed state: %d file(s) from the task-local copy, %d from the "
                "checkpoint storage",
                local,
                remote,
            )
        channel_state: RestoredChannelState | None = restored.get(CHANNEL_STATE_KEY)
        if channel_state is not None:
            # in-flight records of an unaligned checkpoint come before any new input
            self.replay.extend(channel_state.read(env.storage.filesystems))

    @property
    def restored_files(self) -> tuple[int, int]:
        """Keyed-state files read on restore: (from task-local copies, from the storage)."""
        counts = [op.restored_files for op in self.ops]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    @property
    def records_out(self) -> int:
        return sum(w.records_out for w in self.writers)

    def backpressured_s(self, now: float) -> float:
        """Seconds spent blocked sending output downstream (`now`: perf_counter())."""
        return sum(w.backpressured_s(now) for w in self.writers)

    def _wait(self, timeout: float) -> tuple[bool, Any] | None:
        """`gate.get(timeout)`, counted as idle time."""
        started = time.perf_counter()
        got = self.gate.get(timeout)
        self.idle_s += time.perf_counter() - started
        return got

    # Step 0: run ------------------------------------------------------------------------------
    def run(self) -> None:
        opened: list[Any] = []
        failed = False
        try:
            for op in self.ops:
                op.open()
                opened.append(op)
            if self.vertex.is_source:
                self._source_loop()
            else:
                self._input_loop()
            for w in self.writers:
                w.broadcast_event(EndOfPartition())
        except TaskCancelledError:
            pass
        except BaseException:
            failed = True
            raise
        finally:
            errors = []
            for op in reversed(opened):
                try:
                    op.close()
                except Exception as e:  # close every operator; report the first failure
                    errors.append(e)
            if errors and not failed:  # a close error must not hide the original failure
                raise errors[0]

    def _source_loop(self) -> None:
        source: SourceOperator = self.ops[0]
        finished = False
        get = self.gate.get
        periodic = PeriodicWatermarks(self.ops) or None
        while not self.final_notified:
            msg = get(0)
            if msg is not None:
                self._on_control(msg[1])
                continue
            if finished or self.final_checkpoint_id is not None:
                # finished, or stopping: no records after a stop-with-savepoint's barrier
                msg = self._wait(0.05)
                if msg is not None:
                    self._on_control(msg[1])
                continue
            if periodic is not None:
                periodic.maybe_emit()
            batch = None if self.draining else source.poll(self.batch_size)
            if batch:
                self.records_in += len(batch)  # a source's input: records read from its splits
            if batch is None:
                finished = True
                self._finish_input()
                self.control.send(SourceFinished(self.attempt, self.subtask_id))
            elif not batch:
                self._idle_flush()
                msg = self._wait(0.005)
                if msg is not None:
                    self._on_control(msg[1])
            self._maybe_flush()

    def _input_loop(self) -> None:
        get, head, handler, stash = self.gate.get, self.ops[0], self.handler, self.stash
        timers = ChainTimers(self.ops)  # keyed processing-time timers fire between batches
        periodic = PeriodicWatermarks(self.ops) or None  # assign_timestamps_and_watermarks
        while not (self.final_notified and self.open_channels == 0):
            if periodic is not None:
                periodic.maybe_emit()
            # none after a final checkpoint's barrier (stop-with-savepoint): they stay in it
            timer_wait = timers.fire_due() if timers and self.final_checkpoint_id is None else None
            deadline = handler.alignment_deadline
            if deadline is not None and time.monotonic() >= deadline:
                self._apply(handler.on_timer())  # the alignment timed out: go unaligned
            if self.replay:
                channel, payload = self.replay.popleft()
            else:
                got = get(0)
                if got is None:
                    self._idle_flush()
                    wait = self.buffer_timeout.idle_wait_s
                    if deadline is not None:
                        wait = max(min(wait, deadline - time.monotonic()), 0.0)
                    if timer_wait is not None:
                        wait = min(wait, timer_wait)
                    got = self._wait(wait)
                    if got is None:
                        continue
                is_control, item = got
                if is_control:
                    self._on_control(item)
                    continue
                channel, payload = item
            if handler.is_blocked(channel):
                stash[channel].append(payload)
                continue
            if isinstance(payload, list):  # a batch (TimestampedBatch is a list too)
                self.records_in += len(payload)
                if self._two_input is None:
                    head.process_batch(payload)
                else:  # to the input of a two-input head that `channel` feeds
                    self._two_input(channel, payload)
                self._maybe_flush()
            else:
                self._on_event(channel, payload)

    def _maybe_flush(self) -> None:
        now = time.monotonic()
        if self.buffer_timeout.flush_due(now, self._last_flush):
            self._flush(now)

    def _idle_flush(self) -> None:
        if self.buffer_timeout.flush_when_idle:
            self._flush()

    def _flush(self, now: float | None = None) -> None:
        for w in self.writers:
            w.flush()
        self._last_flush = now or time.monotonic()

    # events and actions -----------------------------------------------------------------------
    def _on_event(self, channel: int, event: Any) -> None:
        match event:
            case CheckpointBarrier():
                # (monotonic, wall ms) when the first barrier of this checkpoint arrived
                self._first_barrier.setdefault(
                    event.checkpoint_id, (time.monotonic(), int(time.time() * 1000))
                )
                self._apply(self.handler.on_barrier(channel, event))
            case CancelCheckpointMarker(checkpoint_id=cid):
                self._apply(self.handler.on_cancel_marker(channel, cid))
            case EndOfData():
                self.end_of_data.add(channel)
                if len(self.end_of_data) == len(self.stash):
                    self._finish_input()
            case Watermark(timestamp=timestamp):
                self._on_valve(self.valve.on_watermark(channel, timestamp))
            case WatermarkStatus(idle=idle):
                self._on_valve(self.valve.on_status(channel, idle))
            case EndOfPartition():
                self.open_channels -= 1
                self._apply(self.handler.on_end_of_partition(channel))
            case _:
                raise TypeError(f"unexpected event on channel {channel}: {event!r}")

    def _on_valve(self, out: ValveOutput) -> None:
        head = self.ops[0]
        if out.idle is False:  # active again: before the watermark it brings
            head.process_watermark_status(False)
        if out.watermark is not None:
            head.process_watermark(out.watermark)
        if out.idle:
            head.process_watermark_status(True)

    def _apply(self, actions: list) -> None:
        for action in actions:
            match action:
                case TriggerCheckpoint(barrier=barrier, unaligned_channels=channels):
                    self._checkpoint(barrier, channels)
                case AbortCheckpoint(checkpoint_id=cid, reason=reason):
                    self._abort(cid, reason)
                case Unblock(channels=channels):
                    for c in channels:
                        # Stashed frames are older than anything still in the replay queue.
                        self.replay.extendleft((c, p) for p in reversed(self.stash[c]))
                        self.stash[c].clear()

    def _abort(self, checkpoint_id: int, reason: str) -> None:
        for w in self.writers:
            w.broadcast_event(CancelCheckpointMarker(checkpoint_id))
        self.control.send(DeclineCheckpoint(self.attempt, self.subtask_id, checkpoint_id, reason))

    def _on_control(self, msg: Any) -> None:
        match msg:
            case TriggerMessage(checkpoint_id=cid, timestamp_ms=ts, options=options):
                barrier = CheckpointBarrier(cid, ts, options)
                if self.handler is None:  # a source
                    self._checkpoint(barrier)
                else:  # an unaligned checkpoint's trigger overtakes everything queued
                    self._apply(self.handler.on_trigger(barrier))
            case ChannelStateCaptured(checkpoint_id=cid):
                self._write_unaligned(cid)
            case NotifyCheckpointComplete(checkpoint_id=cid):
                if self.local_state is not None:
                    self.local_state.confirm(cid)
                for op in self.ops:
                    op.notify_checkpoint_complete(cid)
                if self.final_checkpoint_id is not None and cid >= self.final_checkpoint_id:
                    self.final_notified = True
            case DrainSources():
                self.draining = True
            case NotifyCheckpointAborted(checkpoint_id=cid):
                if cid == self.final_checkpoint_id:  # a failed stop-with-savepoint: resume
                    self.final_checkpoint_id = None
                handler = self.handler
                if (
                    handler is not None
                    and handler.is_aligning
                    and (handler.current_checkpoint_id == cid)
                ):  # expired or declined elsewhere: stop holding channels back for it
                    self._apply(handler.abort_current(f"checkpoint {cid} was aborted"))
                if self._unaligned.pop(cid, None) is not None:
                    self.gate.abort_capture(cid)
                for op in self.ops:
                    op.notify_checkpoint_aborted(cid)
            case CancelSlot():
                raise TaskCancelledError("cancelled by the JobMaster")
            case Mail(action=action):  # e.g. async I/O results (runtime/async_io.py)
                action()

    def _finish_input(self) -> None:
        """End of input (FLIP-147's endInput): event time jumps to its end (every event-time
        timer fires), operators flush, then EndOfData goes downstream."""
        self.ops[0].process_watermark(MAX_WATERMARK)
        for op in self.ops:
            op.finish()
        for w in self.writers:
            w.broadcast_event(EndOfData())

    # checkpoints (DESIGN §2 step 4) -------------------------------------------------------------
    def _checkpoint(
        self, barrier: CheckpointBarrier, unaligned_channels: tuple[int, ...] | None = None
    ) -> None:
        """Snapshot for `barrier`; `unaligned_channels` (unaligned checkpoints) are the input
        channels whose records up to the barrier are in flight and persisted with it."""
        cid = barrier.checkpoint_id
        started = time.perf_counter()
        # Step 1: synchronous phase — capture every operator's state between two batches.
        try:
            faults.reach(faults.Site.SYNC_SNAPSHOT, cid)
            savepoint = barrier.options.is_savepoint
            snapshots = [
                (op.uid, op.snapshot_state(cid, barrier.timestamp_ms, savepoint)) for op in self.ops
            ]
        except Exception as e:
            if self.handler is not None:
                self._apply(self.handler.abort_current(f"snapshot failed: {e}"))
            self._abort(cid, f"snapshot of {self.vertex.name} failed: {type(e).__name__}: {e}")
            return
        # Step 2: forward the barrier (after the records that precede it).
        for w in self.writers:
            w.broadcast_event(barrier)
        if barrier.options.is_final:
            self.final_checkpoint_id = cid
        sync_ms = (time.perf_counter() - started) * 1000
        timings = self._barrier_timings(barrier)
        # Step 3: asynchronous phase — write the files, then acknowledge with their handles;
        # for an unaligned checkpoint, once the in-flight frames are all recorded.
        if not unaligned_channels:
            frames = None if unaligned_channels is None else []
            self.env.executor.submit(
                self._write_and_ack, cid, snapshots, sync_ms, timings, frames, barrier.options
            )
            return
        for older in [i for i in self._unaligned if i < cid]:
            del self._unaligned[older]
            self._abort(older, f"subsumed by checkpoint {cid} before its in-flight data arrived")
        self._unaligned[cid] = (snapshots, sync_ms, timings)
        self.gate.start_capture(cid, unaligned_channels, self.replay)

    def _write_unaligned(self, cid: int) -> None:
        pending = self._unaligned.pop(cid, None)
        frames = self.gate.take_capture(cid)
        if pending is None or frames is None:  # aborted meanwhile
            return
        snapshots, sync_ms, timings = pending
        self.env.executor.submit(self._write_and_ack, cid, snapshots, sync_ms, timings, frames)

    def _barrier_timings(self, barrier: CheckpointBarrier) -> tuple[float, float]:
        """(alignment ms, start delay ms) of this subtask for `barrier`'s checkpoint."""
        cid = barrier.checkpoint_id
        for old in [k for k in self._first_barrier if k < cid]:  # aborted ones
            del self._first_barrier[old]
        first = self._first_barrier.pop(cid, None)
        if first is None:  # a source: triggered directly
            return 0.0, max(time.time() * 1000 - barrier.timestamp_ms, 0.0)
        arrived_mono, arrived_ms = first
        return (time.monotonic() - arrived_mono) * 1000, max(arrived_ms - barrier.timestamp_ms, 0)

    def _write_and_ack(
        self,
        cid: int,
        snapshots: list[tuple[str, OperatorSnapshot | None]],
        sync_ms: float,
        timings: tuple[float, float],
        frames: list[bytes] | None,
        options: CheckpointOptions | None = None,
    ) -> None:
        """Step 3 (asynchronous phase): write the state files (and, for an unaligned
        checkpoint, the channel state whose frames are given), then acknowledge with their
        handles; a failure declines the checkpoint."""
        started = time.perf_counter()
        key_groups = {
            op.uid: op.keyed_backend.key_group_range
            for op in self.ops
            if op.keyed_backend is not None
        }
        target = options.target_location if options is not None else None
        try:
            state, channel_state_bytes = write_snapshot(
                self.env, self.subtask, cid, snapshots, key_groups, frames, target, self.ops[0].uid
            )
            async_ms = (time.perf_counter() - started) * 1000
            self.control.send(
                AcknowledgeCheckpoint(
                    self.attempt,
                    self.subtask_id,
                    cid,
                    state,
                    sync_ms,
                    async_ms,
                    *timings,
                    channel_state_bytes=channel_state_bytes,
                    unaligned=frames is not None,
                )
            )
        except Exception as e:
            detail = "".join(traceback.format_exception_only(e)).strip()
            self.control.send(
                DeclineCheckpoint(
                    self.attempt, self.subtask_id, cid, f"writing state failed: {detail}"
                )
            )

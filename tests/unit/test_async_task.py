"""A real StreamTask whose chain is an AsyncWaitOperator, driven by scripted frames (the
Harness of test_stream_task.py, with the async operator instead of the keyed sum): results
reach the task's output as soon as their requests complete, although the task's loop is idle
in a long wait on its gate (a Mail wakes it: no polling); unordered results keep to their side
of a watermark; a checkpoint taken while requests are in flight stores their inputs in its
state file."""

from __future__ import annotations

import threading
import time
from functools import partial

from tests.support.tasks import task_environment
from tests.unit.test_async_operator import Gated
from tests.unit.test_stream_task import WAIT_S, Driver, InlineExecutor
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.runtime.async_io import STATE_NAME, AsyncWaitOperator
from tidegate.runtime.events import CheckpointBarrier, Watermark
from tidegate.runtime.gate import InputGate
from tidegate.runtime.messages import AcknowledgeCheckpoint, CancelSlot
from tidegate.runtime.network import LocalTransport, RecordWriter
from tidegate.runtime.partitioners import ForwardPartitioner
from tidegate.runtime.plan import OperatorSpec, VertexSpec
from tidegate.runtime.records import TimestampedBatch, timestamps_of
from tidegate.runtime.task import StreamTask
from tidegate.state.snapshot_format import read_index, read_operator_state

#: the task's idle wait on its gate: results must not wait for it to end
IDLE_WAIT_S = 30.0


class AsyncTask:
    def __init__(self, tmp_path) -> None:
        self.gate, self.out = InputGate(1_000), InputGate(1_000)
        self.driver = Driver()
        self.storage = CheckpointStorage(str(tmp_path / "chk"), "job")
        env = task_environment(
            self.storage,
            control=self.driver,
            executor=InlineExecutor(),
            buffer_timeout_s=IDLE_WAIT_S,
        )
        self.function = Gated()
        make = partial(AsyncWaitOperator, self.function, timeout_ms=0, capacity=10, ordered=False)
        op = OperatorSpec(
            op_id=1, uid="lookup", name="lookup", factory=make, chained_outputs=(),
            network_outputs=(1,),
        )  # fmt: skip
        vertex = VertexSpec(
            vertex_id=1, name="lookup", parallelism=1, operators=(op,), input_edges=(),
            is_source=False,
        )  # fmt: skip
        forward = ForwardPartitioner()
        writer = RecordWriter(
            [(LocalTransport(self.out), 0)],
            forward.bind(1, 128),
            100,
            forward.bind_timestamped(1, 128),
        )
        self.task = StreamTask(
            env=env, vertex=vertex, subtask=0, gate=self.gate, writers={1: writer},
            num_channels=1, restored=None,
        )  # fmt: skip
        self.errors: list[BaseException] = []
        self.items: list = []

    def run(self) -> None:
        try:
            self.task.run()
        except BaseException as e:
            self.errors.append(e)

    def wait_for_output(self, count: int) -> float:
        """Seconds until `count` output items (records and events) arrived."""
        started = time.monotonic()
        while len(self.items) < count:
            got = self.out.get(WAIT_S - (time.monotonic() - started))
            assert got is not None, f"only {self.items} within {WAIT_S}s; errors {self.errors}"
            payload = got[1][1]
            if isinstance(payload, list):
                stamps = timestamps_of(payload) or [None] * len(payload)
                self.items.extend(zip(payload, stamps, strict=True))
            else:
                self.items.append(payload)
        return time.monotonic() - started

    def wait_for_calls(self, count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while sum(getattr(self.function, "calls", {}).values()) < count:
            assert time.monotonic() < deadline, "the requests did not start"
            time.sleep(0.01)


def test_results_wake_the_idle_task_and_keep_to_their_side_of_a_watermark(tmp_path) -> None:
    t = AsyncTask(tmp_path)
    thread = threading.Thread(target=t.run, daemon=True)
    thread.start()
    t.gate.put_data((0, TimestampedBatch([1, 2], [1, 2])))
    t.gate.put_data((0, Watermark(5)))
    t.gate.put_data((0, TimestampedBatch([6, 7], [6, 7])))
    t.wait_for_calls(4)
    time.sleep(0.1)  # the loop is now idle, in its 30 s wait on the gate

    t.function.release(2, 6)
    assert t.wait_for_output(1) < 5, "the result must not wait for the loop's idle timeout"
    assert t.items == [("r2", 2)]  # 6 is done too, but behind watermark 5 (and 1)

    t.gate.put_data((0, CheckpointBarrier(1, 0)))  # 1 and 7 in flight, 6 done: all stored
    ack = t.driver.wait_for(lambda m: isinstance(m, AcknowledgeCheckpoint), "the checkpoint")
    handle = ack.state["lookup"]
    with open(f"{t.storage.checkpoint_dir(1)}/{handle.file}", "rb") as f:
        mode, elements = read_operator_state(f, read_index(f))[STATE_NAME]
    assert mode == "split"
    assert elements[0] == ("record", 1, 1) and elements[1] == ("watermark", 5)
    assert sorted(elements[2:]) == [("record", 6, 6), ("record", 7, 7)]

    t.function.release(1)
    assert t.wait_for_output(5) < 5
    # the barrier went on at the snapshot: the results of the stored inputs come after it
    assert isinstance(t.items[1], CheckpointBarrier)
    assert t.items[2:5] == [("r1", 1), Watermark(5), ("r6", 6)]
    t.function.release(7)
    t.wait_for_output(6)
    assert t.items[5] == ("r7", 7)

    t.gate.put_control(CancelSlot("test over"))
    thread.join(WAIT_S)
    assert not thread.is_alive() and t.errors == []

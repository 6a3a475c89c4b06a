"""A real StreamTask (a keyed rolling sum reading two channels) driven by scripted frames,
events and control messages: no processes, no sockets, no Spark. The input gate is filled by
the test, the output is an in-memory gate, the driver is a recorder of control messages, and
the asynchronous snapshot phase runs inline, so every step happens in the scripted order.

What is checked: the aligned barrier's cut (records after a channel's barrier wait until the
snapshot), the state file the acknowledgement names, a cancelled alignment, a failing write
(a decline, and the task goes on), and the end of input with the final checkpoint."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor, Future
from functools import partial
from pathlib import Path

import pytest

from tests.support.tasks import task_environment
from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.runtime.events import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartition,
)
from tidegate.runtime.gate import InputGate
from tidegate.runtime.messages import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    NotifyCheckpointComplete,
)
from tidegate.runtime.network import LocalTransport, RecordWriter
from tidegate.runtime.operators import KeyedReduceOperator
from tidegate.runtime.partitioners import ForwardPartitioner
from tidegate.runtime.plan import OperatorSpec, VertexSpec
from tidegate.runtime.task import StreamTask
from tidegate.state.snapshot_format import read_key_groups

MAX_PARALLELISM = 128
WAIT_S = 30


class InlineExecutor(Executor):
    """Runs the asynchronous phase at once, on the task's thread (deterministic order)."""

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class Driver:
    """The control connection's driver side: records what the task sends."""

    def __init__(self) -> None:
        self.sent: list = []
        self._changed = threading.Condition()

    def send(self, message) -> bool:
        with self._changed:
            self.sent.append(message)
            self._changed.notify_all()
        return True

    def wait_for(self, predicate, what: str):
        deadline = time.monotonic() + WAIT_S
        with self._changed:
            while not (found := [m for m in self.sent if predicate(m)]):
                if not self._changed.wait(deadline - time.monotonic()):
                    raise AssertionError(f"no {what} within {WAIT_S}s; sent: {self.sent}")
            return found[0]


def add(a, b):
    return (a[0], a[1] + b[1])


class CountingGate(InputGate):
    """An input gate that counts the task's non-blocking looks into it (an idle loop that
    spins shows as many)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.polls = 0

    def get(self, timeout):
        if timeout == 0:
            self.polls += 1
        return super().get(timeout)


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        checkpoint_base: Path | None = None,
        buffer_timeout_s: float | None = 0.001,
    ) -> None:
        self.gate, self.out = CountingGate(1_000), InputGate(1_000)
        self.driver = Driver()
        self.storage = CheckpointStorage(str(checkpoint_base or tmp_path / "chk"), "job")
        env = task_environment(
            self.storage,
            control=self.driver,
            executor=InlineExecutor(),
            buffer_timeout_s=buffer_timeout_s,
        )
        op = OperatorSpec(
            op_id=1,
            uid="sum",
            name="Keyed Reduce",
            factory=partial(KeyedReduceOperator, None, add, lambda r: r[0]),
            chained_outputs=(),
            network_outputs=(1,),
        )
        vertex = VertexSpec(
            vertex_id=1, name="sum", parallelism=1, operators=(op,), input_edges=(), is_source=False
        )
        writer = RecordWriter(
            [(LocalTransport(self.out), 0)], ForwardPartitioner().bind(1, MAX_PARALLELISM), 100
        )
        self.task = StreamTask(
            env=env, vertex=vertex, subtask=0, gate=self.gate, writers={1: writer},
            num_channels=2, restored=None,
        )  # fmt: skip
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.task.run()
        except BaseException as e:
            self.errors.append(e)

    def script(self, *frames) -> None:
        for channel, payload in frames:
            self.gate.put_data((channel, payload))

    def start(self) -> Harness:
        self.thread.start()
        return self

    def finish(self, final_checkpoint: int) -> None:
        """End of input on both channels, the final checkpoint, its notification, the end."""
        barrier = CheckpointBarrier(final_checkpoint, 0, CheckpointOptions(is_final=True))
        self.script((0, EndOfData()), (1, EndOfData()), (0, barrier), (1, barrier))
        self.driver.wait_for(
            lambda m: isinstance(m, AcknowledgeCheckpoint) and m.checkpoint_id == final_checkpoint,
            f"acknowledgement of the final checkpoint {final_checkpoint}",
        )
        self.gate.put_control(NotifyCheckpointComplete(final_checkpoint))
        self.script((0, EndOfPartition()), (1, EndOfPartition()))
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the task did not end"
        assert self.errors == []

    def output(self) -> list:
        items = []
        while (got := self.out.get(0)) is not None:
            items.append(got[1][1])
        return items

    def state_in(self, ack: AcknowledgeCheckpoint) -> dict:
        handle = ack.state["sum"]
        path = f"{self.storage.checkpoint_dir(ack.checkpoint_id)}/{handle.file}"
        with open(path, "rb") as f:
            groups = read_key_groups(f, handle.index, handle.key_group_range)
            return {k: v for _kg, states in groups for k, v in states["__reduce__"][1].items()}


def acks(driver: Driver) -> list[AcknowledgeCheckpoint]:
    return [m for m in driver.sent if isinstance(m, AcknowledgeCheckpoint)]


def test_records_after_a_channels_barrier_wait_for_the_snapshot_and_are_not_in_it(tmp_path):
    h = Harness(tmp_path)
    h.script(
        (0, [("a", 1), ("b", 2)]),
        (1, [("a", 3)]),
        (0, CheckpointBarrier(1, 0)),
        (0, [("a", 10)]),  # after channel 0's barrier: held back until channel 1's arrives
        (1, [("b", 5)]),
        (1, CheckpointBarrier(1, 0)),
    )
    h.start().finish(final_checkpoint=2)
    first, final = acks(h.driver)
    assert first.checkpoint_id == 1 and first.state["sum"].key_group_range == range(0, 128)
    assert h.state_in(first) == {"a": ("a", 4), "b": ("b", 7)}
    assert h.state_in(final) == {"a": ("a", 14), "b": ("b", 7)}
    items = h.output()
    barrier_at = next(i for i, x in enumerate(items) if isinstance(x, CheckpointBarrier))
    records = [r for x in items if isinstance(x, list) for r in x]
    before = [r for x in items[:barrier_at] if isinstance(x, list) for r in x]
    assert before == [("a", 1), ("b", 2), ("a", 4), ("b", 7)]
    assert records == [*before, ("a", 14)]


def test_a_cancel_marker_during_alignment_declines_and_releases_the_held_channel(tmp_path):
    h = Harness(tmp_path)
    h.script(
        (0, CheckpointBarrier(1, 0)),
        (0, [("a", 1)]),  # held back by the alignment
        (1, CancelCheckpointMarker(1)),
    )
    h.start()
    decline = h.driver.wait_for(lambda m: isinstance(m, DeclineCheckpoint), "decline")
    assert decline.checkpoint_id == 1
    h.finish(final_checkpoint=2)
    assert [a.checkpoint_id for a in acks(h.driver)] == [2]
    items = h.output()
    assert CancelCheckpointMarker(1) in items  # forwarded downstream
    assert [r for x in items if isinstance(x, list) for r in x] == [("a", 1)]


def test_a_state_file_that_cannot_be_written_declines_the_checkpoint_and_the_task_goes_on(
    tmp_path,
):
    h = Harness(tmp_path)
    # the checkpoint's directory is a file: creating the state file in it fails
    Path(h.storage.checkpoint_dir(1).removeprefix("file://")).parent.mkdir(parents=True)
    Path(h.storage.checkpoint_dir(1).removeprefix("file://")).write_text("not a directory")
    h.script((0, [("a", 1)]), (0, CheckpointBarrier(1, 0)), (1, CheckpointBarrier(1, 0)))
    h.start()
    decline = h.driver.wait_for(lambda m: isinstance(m, DeclineCheckpoint), "decline")
    assert decline.checkpoint_id == 1 and decline.reason.startswith("writing state failed: ")
    h.script((1, [("a", 2)]))
    h.finish(final_checkpoint=2)
    (final,) = acks(h.driver)
    assert h.state_in(final) == {"a": ("a", 3)}


@pytest.mark.parametrize("checkpoints", [1, 3])
def test_every_completed_alignment_acknowledges_once_in_checkpoint_order(tmp_path, checkpoints):
    h = Harness(tmp_path)
    for cid in range(1, checkpoints + 1):
        h.script((1, [("k", cid)]), (0, CheckpointBarrier(cid, 0)), (1, CheckpointBarrier(cid, 0)))
    h.start().finish(final_checkpoint=checkpoints + 1)
    assert [a.checkpoint_id for a in acks(h.driver)] == list(range(1, checkpoints + 2))
    totals = [h.state_in(a)["k"][1] for a in acks(h.driver)]
    assert totals == [sum(range(1, min(c, checkpoints) + 1)) for c in range(1, checkpoints + 2)]


def test_buffer_timeout_zero_sends_each_batch_at_once_and_the_idle_task_does_not_spin(tmp_path):
    h = Harness(tmp_path, buffer_timeout_s=0.0).start()
    h.script((0, [("a", 1)]))
    assert h.out.get(WAIT_S) == (False, (0, [("a", 1)]))
    polls = h.gate.polls
    time.sleep(0.3)  # idle: the loop waits on its gate (IDLE_POLL_S) instead of polling it
    assert h.gate.polls - polls < 100
    h.finish(final_checkpoint=1)


def test_buffer_timeout_minus_one_holds_a_partial_buffer_until_the_next_event(tmp_path):
    h = Harness(tmp_path, buffer_timeout_s=None).start()
    h.script((0, [("a", 1)]), (1, [("b", 2)]))
    time.sleep(0.3)  # idle with a partly filled buffer: it stays (only full ones go)
    assert h.out.get(0) is None
    h.script((0, CheckpointBarrier(1, 0)), (1, CheckpointBarrier(1, 0)))
    assert h.out.get(WAIT_S) == (False, (0, [("a", 1), ("b", 2)]))  # sent before the barrier
    assert h.out.get(WAIT_S) == (False, (0, CheckpointBarrier(1, 0)))
    h.finish(final_checkpoint=2)

"""In-flight data of unaligned checkpoints: which frames the input gate records, the
channel-state file format, and the cut they form together with the snapshot."""

from __future__ import annotations

import io
import pickle
import threading

import pytest

from tidegate.runtime.events import (
    CancelCheckpointMarker,
    CheckpointBarrier,
    EndOfData,
    EndOfPartition,
)
from tidegate.runtime.gate import ChannelStateCaptured, InputGate
from tidegate.runtime.inflight import InFlightRecorder, ends_in_flight_data
from tidegate.state.channel_state import read_channel_state, write_channel_state
from tidegate.state.snapshot_format import CorruptStateError


def recorded(gate: InputGate, cid: int) -> list[tuple[int, list]]:
    frames = gate.take_capture(cid)
    assert frames is not None, "capture not complete"
    return [pickle.loads(f) for f in frames]


def drain_control(gate: InputGate) -> list:
    items = []
    while (got := gate.get(0)) is not None and got[0]:
        items.append(got[1])
    return items


def test_recorder_keeps_each_channels_records_up_to_its_barrier() -> None:
    r = InFlightRecorder(5, {0, 1})
    assert r.offer(0, [1, 2])
    assert not r.offer(2, [99])  # not a recorded channel
    assert not r.offer(0, CheckpointBarrier(5, 0))
    assert not r.offer(0, [3])  # after its barrier
    assert r.offer(1, [4])
    assert not r.offer(1, EndOfData())  # does not end the channel's in-flight data
    assert not r.complete
    r.offer(1, CheckpointBarrier(6, 0))  # a newer barrier ends it too
    assert r.complete
    assert r.frames == [(0, [1, 2]), (1, [4])]


@pytest.mark.parametrize(
    ("payload", "ends"),
    [
        (CheckpointBarrier(4, 0), False),
        (CheckpointBarrier(5, 0), True),
        (CancelCheckpointMarker(5), True),
        (CancelCheckpointMarker(4), False),
        (EndOfPartition(), True),
        (EndOfData(), False),
        ([1], False),
    ],
)
def test_what_ends_a_channels_in_flight_data(payload, ends: bool) -> None:
    assert ends_in_flight_data(payload, 5) is ends


def test_gate_records_queued_frames_then_arrivals_up_to_each_barrier() -> None:
    gate = InputGate(capacity=100)
    gate.put_data((0, ["a"]))
    gate.put_data((1, ["b"]))
    gate.put_data((0, CheckpointBarrier(1, 0)))
    gate.put_data((0, ["after barrier"]))
    gate.put_data((2, ["not recorded"]))
    gate.start_capture(1, [0, 1])
    assert gate.take_capture(1) is None  # channel 1 still owes its barrier
    gate.put_data((1, ["c"]))
    gate.put_data((1, CheckpointBarrier(1, 0)))
    gate.put_data((1, ["d"]))
    assert recorded(gate, 1) == [(0, ["a"]), (1, ["b"]), (1, ["c"])]
    # recorded frames are still delivered to the task, in order
    data = []
    while (got := gate.get(0)) is not None:
        if not got[0]:
            data.append(got[1])
    assert [f for f in data if isinstance(f[1], list)] == [
        (0, ["a"]),
        (1, ["b"]),
        (0, ["after barrier"]),
        (2, ["not recorded"]),
        (1, ["c"]),
        (1, ["d"]),
    ]


def test_frames_the_task_took_but_did_not_process_come_first() -> None:
    gate = InputGate(capacity=10)
    gate.put_data((0, ["queued"]))
    before = [(1, ["replayed"]), (0, ["replayed0"]), (1, CheckpointBarrier(3, 0)), (1, ["late"])]
    gate.start_capture(3, [0, 1], before)
    gate.put_data((0, CheckpointBarrier(3, 0)))
    assert recorded(gate, 3) == [(1, ["replayed"]), (0, ["replayed0"]), (0, ["queued"])]


def test_completion_is_announced_once_as_a_control_item() -> None:
    gate = InputGate(capacity=10)
    gate.start_capture(2, [0])
    gate.put_data((0, [1]))
    gate.put_data((0, CancelCheckpointMarker(2)))
    gate.put_data((0, EndOfPartition()))
    assert drain_control(gate) == [ChannelStateCaptured(2)]
    assert recorded(gate, 2) == [(0, [1])]
    assert gate.take_capture(2) is None  # taken


def test_a_capture_with_every_barrier_already_queued_completes_at_once() -> None:
    gate = InputGate(capacity=10)
    gate.put_data((0, [1]))
    gate.put_data((0, CheckpointBarrier(1, 0)))
    gate.start_capture(1, [0])
    assert drain_control(gate) == [ChannelStateCaptured(1)]
    assert recorded(gate, 1) == [(0, [1])]


def test_records_are_persisted_as_they_were_when_they_arrived() -> None:
    gate = InputGate(capacity=10)
    gate.start_capture(1, [0])
    record = {"n": 1}
    gate.put_data((0, [record]))
    record["n"] = 2  # a user function mutating its input in place
    gate.put_data((0, CheckpointBarrier(1, 0)))
    assert recorded(gate, 1) == [(0, [{"n": 1}])]


def test_network_frames_are_kept_as_received() -> None:
    gate = InputGate(capacity=10)
    gate.start_capture(1, [0])
    raw = pickle.dumps((0, ["from the wire"]))
    gate.put_data(pickle.loads(raw), raw)
    gate.put_data((0, CheckpointBarrier(1, 0)))
    assert gate.take_capture(1) == [raw]


def test_an_aborted_or_subsumed_capture_records_nothing_more() -> None:
    gate = InputGate(capacity=10)
    gate.start_capture(1, [0])
    gate.start_capture(2, [0])  # a newer checkpoint replaces it
    assert gate.take_capture(1) is None
    gate.abort_capture(2)
    gate.put_data((0, [1]))
    gate.put_data((0, CheckpointBarrier(2, 0)))
    assert gate.take_capture(2) is None
    assert drain_control(gate) == []


def test_recorded_channels_pass_a_full_gate_others_wait() -> None:
    gate = InputGate(capacity=1)
    gate.put_data((1, ["fills the gate"]))
    gate.start_capture(1, [0])
    gate.put_data((0, ["in flight"]))  # does not block although the gate is full
    gate.put_data((0, CheckpointBarrier(1, 0)))
    assert recorded(gate, 1) == [(0, ["in flight"])]
    blocked = threading.Thread(target=gate.put_data, args=((1, ["waits"]),), daemon=True)
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive()  # channel 1 is not recorded: backpressure as usual
    while gate.get(0) is not None:
        pass
    blocked.join(5)
    assert not blocked.is_alive()


def test_channel_state_file_round_trip_and_damage() -> None:
    frames = [pickle.dumps((0, [1, 2])), pickle.dumps((3, ["x"]))]
    buf = io.BytesIO()
    size = write_channel_state(buf, frames)
    assert size == len(buf.getvalue())
    assert read_channel_state(io.BytesIO(buf.getvalue()), "f") == [(0, [1, 2]), (3, ["x"])]
    damaged = bytearray(buf.getvalue())
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptStateError, match="frame 1 of 2 is damaged"):
        read_channel_state(io.BytesIO(bytes(damaged)), "f")
    with pytest.raises(CorruptStateError, match="truncated"):
        read_channel_state(io.BytesIO(buf.getvalue()[:20]), "f")
    with pytest.raises(CorruptStateError, match="not a tidegate channel-state file"):
        read_channel_state(io.BytesIO(b"garbage"), "f")

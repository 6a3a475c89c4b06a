"""Record timestamps travel with records: through map, filter, flat_map, process and keyed
reduce, every partitioner, record writers, real pickled frames and channel state; watermarks
pass along a chain after the records before them and fire event-time timers; side outputs
keep timestamps; timestamp assignment and watermark generation in an operator and a source,
including the watermark restored after a failure. Real operators, gates and state backends."""

from __future__ import annotations

import io
import pickle

import cloudpickle
import pytest

from tidegate.common import Duration, WatermarkStrategy
from tidegate.common.watermark_strategy import TimestampAssigner
from tidegate.connectors.collection import CollectionSource
from tidegate.datastream import (
    BroadcastProcessFunction,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
)
from tidegate.runtime.broadcast import BroadcastProcessOperator
from tidegate.runtime.connector_operators import SourceOperator
from tidegate.runtime.events import Watermark, WatermarkStatus
from tidegate.runtime.frames import encode_frame
from tidegate.runtime.gate import InputGate
from tidegate.runtime.internal_timers import MAX_WATERMARK
from tidegate.runtime.network import LocalTransport, RecordWriter
from tidegate.runtime.operators import (
    FilterOperator,
    FlatMapOperator,
    KeyedReduceOperator,
    MapOperator,
    OperatorRuntime,
    ProcessOperator,
    SideOutputOperator,
)
from tidegate.runtime.partitioners import (
    BroadcastPartitioner,
    ForwardPartitioner,
    KeyGroupStreamPartitioner,
    RebalancePartitioner,
    ShufflePartitioner,
)
from tidegate.runtime.records import TimestampedBatch, timestamps_of, with_timestamps
from tidegate.runtime.restore import RestoredOperatorState
from tidegate.runtime.timestamps import TimestampsAndWatermarksOperator
from tidegate.state.channel_state import read_channel_state, write_channel_state
from tidegate.state.snapshot_format import read_key_groups

RUNTIME = OperatorRuntime(0, 1, 128, 0)


class Collect:
    """A downstream operator that keeps every batch, watermark and status change, in order."""

    def __init__(self) -> None:
        self.items: list = []

    def process_batch(self, records: list) -> None:
        self.items.append(("batch", list(records), timestamps_of(records)))

    def process_watermark(self, watermark: int) -> None:
        self.items.append(("wm", watermark))

    def process_watermark_status(self, idle: bool) -> None:
        self.items.append(("idle", idle))

    @property
    def pairs(self) -> list:
        """(value, timestamp) of every record received."""
        out = []
        for item in self.items:
            if item[0] == "batch":
                out.extend(zip(item[1], item[2] or [None] * len(item[1]), strict=True))
        return out


def wire(op, *outputs, restored=None, runtime=RUNTIME):
    op.uid, op.name = "op", "Op"
    op.outputs = list(outputs)
    op.initialize_state(runtime, restored)
    op.open()
    return op


def batch(values, timestamps):
    return TimestampedBatch(values, timestamps)


# the batch representation ------------------------------------------------------------------
def test_a_batch_without_timestamps_stays_a_plain_list():
    values = [1, 2]
    assert with_timestamps(values, None) is values and timestamps_of(values) is None
    assert timestamps_of(batch([1, 2], [10, 20])) == [10, 20]


def test_a_timestamped_batch_pickles_with_its_timestamps_over_a_real_frame():
    frame = (3, batch(["a", {"k": 1}], [7, 8]))
    for plain in (True, False):
        data, _ = encode_frame(frame, plain)
        channel, payload = pickle.loads(data)
        assert channel == 3 and type(payload) is TimestampedBatch
        assert list(payload) == ["a", {"k": 1}] and payload.timestamps == [7, 8]
    assert cloudpickle.loads(cloudpickle.dumps(frame[1])).timestamps == [7, 8]


# one-input operators -------------------------------------------------------------------------
def test_map_keeps_each_records_timestamp_and_plain_batches_stay_plain():
    out = Collect()
    op = wire(MapOperator(None, lambda v: v * 10), out)
    op.process_batch(batch([1, 2], [100, 200]))
    op.process_batch([3])
    assert out.items == [("batch", [10, 20], [100, 200]), ("batch", [30], None)]


def test_filter_keeps_the_timestamps_of_the_kept_records():
    out = Collect()
    op = wire(FilterOperator(None, lambda v: v % 2 == 0), out)
    op.process_batch(batch([1, 2, 3, 4], [10, 20, 30, 40]))
    assert out.pairs == [(2, 20), (4, 40)]


def test_every_flat_map_output_inherits_its_inputs_timestamp():
    out = Collect()
    op = wire(FlatMapOperator(None, lambda v: [v] * v), out)
    op.process_batch(batch([0, 1, 2], [5, 6, 7]))
    assert out.pairs == [(1, 6), (2, 7), (2, 7)]


def test_a_keyed_map_and_a_keyed_reduce_keep_timestamps():
    out = Collect()
    op = wire(KeyedReduceOperator(None, lambda a, b: a + b, lambda v: v % 2), out)
    op.process_batch(batch([1, 2, 3], [10, 20, 30]))
    assert out.pairs == [(1, 10), (2, 20), (4, 30)]


class Echo(ProcessFunction):
    def process_element(self, value, ctx):
        yield (value, ctx.timestamp())
        yield ("again", ctx.timestamp())


def test_process_outputs_inherit_the_input_timestamp_which_ctx_timestamp_returns():
    out = Collect()
    op = wire(ProcessOperator(Echo(), Echo().process_element), out)
    op.process_batch(batch(["x"], [42]))
    op.process_batch(["y"])
    assert out.pairs == [
        (("x", 42), 42),
        (("again", 42), 42),
        (("y", None), None),
        (("again", None), None),
    ]


# partitioners and record writers ----------------------------------------------------------------
@pytest.mark.parametrize(
    "partitioner",
    [
        RebalancePartitioner(),
        ShufflePartitioner(),
        BroadcastPartitioner(),
        KeyGroupStreamPartitioner(lambda v: v % 5),
    ],
    ids=["rebalance", "shuffle", "broadcast", "key_group"],
)
def test_every_partitioner_sends_each_timestamp_to_its_records_channel(partitioner):
    values = list(range(40))
    timestamps = [1_000 + v for v in values]
    route = partitioner.bind_timestamped(3, 128)
    buffers = [TimestampedBatch() for _ in range(3)]
    route(values, timestamps, buffers, [b.timestamps for b in buffers])
    routed = [(v, t) for b in buffers for v, t in zip(b, b.timestamps, strict=True)]
    assert all(t == 1_000 + v for v, t in routed)
    copies = 3 if isinstance(partitioner, BroadcastPartitioner) else 1
    assert sorted(routed) == sorted([(v, 1_000 + v) for v in values] * copies)
    if isinstance(partitioner, KeyGroupStreamPartitioner):  # the same channel as plain routing
        plain = [[] for _ in range(3)]
        partitioner.bind(3, 128)(values, plain)
        assert [list(b) for b in buffers] == plain


def test_forward_keeps_timestamps_in_order():
    buffers = [TimestampedBatch()]
    ForwardPartitioner().bind_timestamped(1, 128)([1, 2], [5, 6], buffers, [buffers[0].timestamps])
    assert list(buffers[0]) == [1, 2] and buffers[0].timestamps == [5, 6]


def drain(gate: InputGate) -> list:
    items = []
    while (got := gate.get(0)) is not None:
        items.append(got[1][1])
    return items


def test_a_record_writer_sends_timestamps_and_watermarks_in_order_and_flushes_on_a_kind_change():
    gate = InputGate(100)
    part = KeyGroupStreamPartitioner(lambda v: v)
    writer = RecordWriter(
        [(LocalTransport(gate), 0)], part.bind(1, 128), 100, part.bind_timestamped(1, 128)
    )
    writer.process_batch(batch([1, 2], [10, 20]))
    writer.process_batch([3])  # another kind: the timestamped records go first
    writer.process_watermark(15)
    writer.process_watermark_status(True)
    items = drain(gate)
    assert [type(i) for i in items] == [TimestampedBatch, list, Watermark, WatermarkStatus]
    assert items[0].timestamps == [10, 20] and items[1] == [3]
    assert items[2] == Watermark(15) and items[3] == WatermarkStatus(True)


def test_in_flight_timestamped_frames_keep_their_timestamps_in_channel_state():
    gate = InputGate(100)
    gate.start_capture(1, [0])
    gate.put_data((0, batch(["a"], [99])))
    gate.put_data((0, Watermark(50)))  # events are not channel state
    frames = gate._capture.frames
    blob = io.BytesIO()
    write_channel_state(blob, [f for _c, f in frames])
    blob.seek(0)
    [(channel, records)] = read_channel_state(blob, "mem")
    assert channel == 0 and list(records) == ["a"] and records.timestamps == [99]


# watermarks along a chain, event-time timers, side outputs ------------------------------------
LATE = OutputTag("late")


class Timers(KeyedProcessFunction):
    """Sets an event-time timer at each record's timestamp + 10; records below the watermark
    go to the side output too; on_timer emits to both outputs."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
        if ctx.timestamp() <= ctx.timer_service().current_watermark():
            ctx.output(LATE, ("late", value))
        yield value

    def on_timer(self, timestamp, ctx):
        ctx.output(LATE, ("timer", ctx.get_current_key()))
        yield ("fired", ctx.get_current_key(), timestamp)


def test_a_watermark_fires_due_event_time_timers_then_goes_downstream_after_their_output():
    out, side = Collect(), Collect()
    selector = SideOutputOperator("late")
    selector.outputs = [side]
    fn = Timers()
    op = wire(ProcessOperator(fn, fn.process_element, lambda v: v), out, selector)
    op.process_batch(batch(["a", "b"], [100, 105]))
    op.process_watermark(112)
    op.process_watermark(111)  # older: ignored
    op.process_batch(batch(["c"], [50]))  # late: still processed (not a window operator)
    op.process_watermark(MAX_WATERMARK)
    assert out.items == [
        ("batch", ["a", "b"], [100, 105]),
        ("batch", [("fired", "a", 110)], [110]),
        ("wm", 112),
        ("batch", ["c"], [50]),
        ("batch", [("fired", "c", 60), ("fired", "b", 115)], [60, 115]),  # timestamp order
        ("wm", MAX_WATERMARK),
    ]
    assert side.pairs == [
        (("timer", "a"), 110),
        (("late", "c"), 50),
        (("timer", "c"), 60),
        (("timer", "b"), 115),
    ]
    assert side.items[-1] == ("wm", MAX_WATERMARK)
    assert op.process_context.timer_service().current_watermark() == MAX_WATERMARK


def test_a_side_output_nobody_reads_is_dropped_and_a_bad_tag_is_refused():
    out = Collect()
    fn = Timers()
    op = wire(ProcessOperator(fn, fn.process_element, lambda v: v), out)
    op.process_batch(batch(["a"], [1]))
    op.process_watermark(100)
    assert len(out.pairs) == 2

    class Bad(ProcessFunction):
        def process_element(self, value, ctx):
            ctx.output("late", value)

    bad = wire(ProcessOperator(Bad(), Bad().process_element), Collect(), SideOutputOperator("x"))
    with pytest.raises(TypeError, match="OutputTag"):
        bad.process_batch([1])


def test_the_watermark_survives_a_snapshot_and_restore_so_fired_timers_do_not_fire_again(
    tmp_path,
):
    fn = Timers()
    op = wire(ProcessOperator(fn, fn.process_element, lambda v: v), Collect())
    op.process_batch(batch(["a", "b"], [100, 200]))
    op.process_watermark(150)  # a's timer (110) fires; b's (210) stays
    snap = op.snapshot_state(1, 0)
    path = tmp_path / "op.state"
    with path.open("wb") as f:
        index = snap.keyed.write(f)
    out = Collect()
    again = ProcessOperator(fn, fn.process_element, lambda v: v)
    again.uid, again.name, again.outputs = "op", "Op", [out]
    again.initialize_state(RUNTIME, RestoredOperatorState(operator_state=snap.operator))
    with path.open("rb") as f:
        again.keyed_backend.restore(read_key_groups(f, index, range(128)))
    again.open()
    assert again.current_watermark == 150
    assert again.process_context.timer_service().current_watermark() == 150
    again.process_watermark(150)  # not an advance: nothing fires, nothing is forwarded
    again.process_watermark(MAX_WATERMARK)
    assert out.items == [("batch", [("fired", "b", 210)], [210]), ("wm", MAX_WATERMARK)]


# timestamp assignment and watermark generation ---------------------------------------------------
class Field(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


def bounded(ms: int = 10) -> WatermarkStrategy:
    return WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(ms)
    ).with_timestamp_assigner(Field())


def test_assign_timestamps_emits_periodic_watermarks_and_drops_upstream_ones_but_the_last():
    out = Collect()
    op = wire(TimestampsAndWatermarksOperator(bounded(10), 0), out)
    op.process_batch([("a", 100), ("b", 90)])
    op.watermarks.periodic()
    op.process_watermark(5_000)  # an upstream watermark: dropped
    op.watermarks.periodic()  # no new timestamp: the same watermark is not sent again
    op.process_watermark(MAX_WATERMARK)
    assert out.items == [
        ("batch", [("a", 100), ("b", 90)], [100, 90]),
        ("wm", 89),
        ("wm", MAX_WATERMARK),
    ]


def test_an_assigner_returning_a_non_int_is_refused_with_the_fix():
    strategy = WatermarkStrategy.no_watermarks().with_timestamp_assigner(lambda v, _t: 1.5)
    op = wire(TimestampsAndWatermarksOperator(strategy, 0), Collect())
    with pytest.raises(TypeError, match="int milliseconds"):
        op.process_batch(["x"])


def test_a_strategy_without_an_assigner_on_records_without_timestamps_is_refused():
    op = wire(TimestampsAndWatermarksOperator(WatermarkStrategy.for_monotonous_timestamps(), 0))
    with pytest.raises(ValueError, match="with_timestamp_assigner"):
        op.process_batch(["x"])


def test_an_idle_output_sends_idle_then_active_again_before_its_next_records():
    out = Collect()
    strategy = bounded(0).with_idleness(Duration.of_millis(1))
    op = wire(TimestampsAndWatermarksOperator(strategy, 0), out)
    generator = op.watermarks.generator
    generator._clock = iter([0.0, 1.0]).__next__
    op.process_batch([("a", 10)])
    op.watermarks.periodic()  # activity: watermark 9
    op.watermarks.periodic()  # quiet: the idle timer starts at t=0
    op.watermarks.periodic()  # 1 s later: idle
    op.process_batch([("b", 20)])
    assert out.items == [
        ("batch", [("a", 10)], [10]),
        ("wm", 9),
        ("idle", True),
        ("idle", False),
        ("batch", [("b", 20)], [20]),
    ]


def source_operator(restored=None) -> tuple[SourceOperator, Collect]:
    out = Collect()
    records = [("r", t) for t in (10, 30, 20, 40)]
    op = SourceOperator(CollectionSource(records), bounded(5), 0)
    return wire(op, out, restored=restored), out


def test_a_source_assigns_timestamps_and_restores_its_last_watermark_which_it_sends_first():
    op, out = source_operator()
    op.poll(2)
    op.watermarks.periodic()
    snap = op.snapshot_state(1, 0)
    assert out.items == [("batch", [("r", 10), ("r", 30)], [10, 30]), ("wm", 24)]
    again, out2 = source_operator(RestoredOperatorState(operator_state=snap.operator))
    again.poll(2)
    again.watermarks.periodic()  # max timestamp 40 -> 34
    assert out2.items == [("wm", 24), ("batch", [("r", 20), ("r", 40)], [20, 40]), ("wm", 34)]


class Tagged(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        ctx.output(LATE, value)
        yield (value, ctx.timestamp(), ctx.current_watermark())

    def process_broadcast_element(self, value, ctx):
        yield ("rule", value, ctx.timestamp())


def test_both_inputs_of_a_broadcast_operator_keep_timestamps_and_see_its_watermark():
    out, side = Collect(), Collect()
    selector = SideOutputOperator("late")
    selector.outputs = [side]
    op = wire(BroadcastProcessOperator(Tagged(), ()), out, selector)
    op.process_watermark(7)
    op.process_batch1(batch(["a"], [10]))
    op.process_batch2(batch(["r"], [3]))
    op.process_batch1(["plain"])
    assert out.pairs == [
        (("a", 10, 7), 10),
        (("rule", "r", 3), 3),
        (("plain", None, 7), None),
    ]
    assert side.pairs == [("a", 10), ("plain", None)]


def test_only_operators_that_decide_on_the_watermark_checkpoint_it():
    stateless = wire(MapOperator(None, lambda v: v), Collect())
    stateless.process_watermark(5)
    assert stateless.current_watermark == 5 and stateless.snapshot_state(1, 0) is None
    fn = Echo()
    process = wire(ProcessOperator(fn, fn.process_element), Collect())
    process.process_watermark(5)
    assert process.snapshot_state(1, 0).operator == {"__watermark__": ("union", [(0, 5)])}

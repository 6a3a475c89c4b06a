"""Two-input operators driven by scripted batches on both inputs, on both state backends:
CoMap/CoFlatMap/CoProcess (runtime/co_process.py), the keyed co-process operator's state,
timers, side outputs, snapshot and restore into another key-group range, and the interval join
(runtime/interval_join.py) against a brute-force reference; plus the API's shapes and errors."""

from __future__ import annotations

import random

import pytest

from tests.unit.window_harness import Collect
from tidegate.common.time import Time
from tidegate.datastream import (
    ConnectedStreams,
    EmbeddedRocksDBStateBackend,
    OutputTag,
    StreamExecutionEnvironment,
)
from tidegate.datastream.functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    ProcessJoinFunction,
)
from tidegate.datastream.state import ValueStateDescriptor
from tidegate.runtime.co_process import CoProcessOperator
from tidegate.runtime.interval_join import IntervalJoinOperator
from tidegate.runtime.operators import OperatorRuntime, SideOutputOperator
from tidegate.runtime.records import TimestampedBatch
from tidegate.state.keygroups import assign_to_key_group, key_group_range
from tidegate.state.snapshot_format import read_key_groups

M = 128
LATE = OutputTag("unmatched")


@pytest.fixture(params=["hashmap", "rocksdb"])
def backend(request, tmp_path):
    if request.param == "rocksdb":
        return EmbeddedRocksDBStateBackend(local_dir=str(tmp_path / "rocksdb"))
    return None


def run(op, backend, *, subtask=0, parallelism=1, restored=None):
    """Initialize, restore (keyed state + watermark) and open `op`; returns (out, side)."""
    op.initialize_state(OperatorRuntime(subtask, parallelism, M, 0, state_backend=backend), None)
    if restored is not None:
        op.keyed_backend.restore(restored(op.keyed_backend.key_group_range))
        op.current_watermark = restored.watermark
    out, side = Collect(), Collect()
    tagged = SideOutputOperator(LATE.tag_id)
    tagged.outputs = [side]
    op.outputs = [out, tagged]
    op.open()
    return out, side


def batch(*pairs):
    """(value, timestamp) pairs as a timestamped batch."""
    return TimestampedBatch([v for v, _ in pairs], [t for _, t in pairs])


def snapshot(op, path):
    with path.open("wb") as f:
        index = op.snapshot_state(1, 0).keyed.write(f)
    watermark = op.current_watermark

    def restored(key_groups):
        return read_key_groups(path.open("rb"), index, key_groups)

    restored.watermark = watermark
    return restored


# CoMap / CoFlatMap / CoProcess ---------------------------------------------------------------
class Tag(CoMapFunction):
    def map1(self, value):
        return ("one", value)

    def map2(self, value):
        return ("two", value)


class Repeat(CoFlatMapFunction):
    def flat_map1(self, value):
        yield from [value] * value

    def flat_map2(self, value):
        yield value.upper()


def co_operator(function, keyed=False):
    from tidegate.datastream.connected_streams import _Many, _Single

    if isinstance(function, CoMapFunction):
        calls = _Single(function.map1), _Single(function.map2)
    elif isinstance(function, CoFlatMapFunction):
        calls = _Many(function.flat_map1), _Many(function.flat_map2)
    else:
        calls = function.process_element1, function.process_element2
    sel = (lambda v: v[0]) if keyed else None
    return CoProcessOperator(function, *calls, sel, sel, uid="co", name="co")


def test_co_map_calls_map1_for_the_first_input_and_map2_for_the_second_keeping_timestamps():
    op = co_operator(Tag())
    out, _ = run(op, None)
    op.process_batch1(batch((1, 10), (2, 20)))
    op.process_batch2([3])
    assert out.records == [(("one", 1), 10), (("one", 2), 20), (("two", 3), None)]


def test_co_flat_map_emits_every_output_of_each_generator_with_its_record_timestamp():
    op = co_operator(Repeat())
    out, _ = run(op, None)
    op.process_batch1(batch((2, 5), (0, 6)))
    op.process_batch2(batch(("a", 7)))
    assert out.records == [(2, 5), (2, 5), ("A", 7)]


def test_a_two_input_operator_rejects_a_batch_without_its_input():
    op = co_operator(Tag())
    run(op, None)
    with pytest.raises(TypeError, match="process_batch1/process_batch2"):
        op.process_batch([1])


class Mark(CoProcessFunction):
    def process_element1(self, value, ctx):
        assert isinstance(ctx, CoProcessFunction.Context)
        ctx.output(LATE, ("side", value, ctx.timestamp()))
        yield ("first", value, ctx.timer_service().current_watermark())

    def process_element2(self, value, ctx):
        yield ("second", value, ctx.timestamp())


def test_a_co_process_function_sees_timestamps_the_watermark_and_writes_side_outputs():
    op = co_operator(Mark())
    out, side = run(op, None)
    op.process_watermark(3)
    op.process_batch1(batch(("x", 4)))
    op.process_batch2(batch(("y", 9)))
    assert out.records == [(("first", "x", 3), 4), (("second", "y", 9), 9)]
    assert side.records == [(("side", "x", 4), 4)]


def test_timers_need_a_keyed_co_process_function():
    class SetsTimer(Mark):
        def process_element1(self, value, ctx):
            ctx.timer_service().register_event_time_timer(5)

    op = co_operator(SetsTimer())
    run(op, None)
    with pytest.raises(RuntimeError, match="timers need a keyed stream"):
        op.process_batch1(batch(("x", 1)))


# KeyedCoProcessFunction: an order/payment join with a timeout --------------------------------
class Match(KeyedCoProcessFunction):
    """Input 1: orders (id, amount); input 2: payments (id, paid). Emits (id, amount, paid) when
    both arrived; an order unpaid 10 ms after its timestamp goes to the side output."""

    def open(self, runtime_context):
        self.order = runtime_context.get_state(ValueStateDescriptor("order"))
        self.paid = runtime_context.get_state(ValueStateDescriptor("paid"))

    def process_element1(self, value, ctx):
        if self.paid.value() is not None:
            yield (ctx.get_current_key(), value[1], self.paid.value())
            self.paid.clear()
        else:
            self.order.update(value[1])
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)

    def process_element2(self, value, ctx):
        if self.order.value() is not None:
            yield (ctx.get_current_key(), self.order.value(), value[1])
            self.order.clear()
        else:
            self.paid.update(value[1])

    def on_timer(self, timestamp, ctx):
        assert isinstance(ctx, KeyedCoProcessFunction.OnTimerContext)
        if self.order.value() is not None:
            ctx.output(LATE, (ctx.get_current_key(), self.order.value()))
            yield ("timeout", ctx.get_current_key(), timestamp, ctx.time_domain().name)
            self.order.clear()


def test_keyed_co_process_keeps_state_per_key_across_both_inputs_and_fires_event_timers(backend):
    op = co_operator(Match(), keyed=True)
    out, side = run(op, backend)
    op.process_batch1(batch((("a", 5), 1), (("b", 7), 2)))
    op.process_batch2(batch((("b", 70), 3), (("c", 9), 4)))
    op.process_batch1(batch((("c", 1), 5)))
    assert out.records == [(("b", 7, 70), 3), (("c", 1, 9), 5)]
    op.process_watermark(10)
    assert side.records == []
    op.process_watermark(11)  # a's timer (1 + 10) fires with key a current
    assert out.records[2:] == [(("timeout", "a", 11, "EVENT_TIME"), 11)]
    assert side.records == [(("a", 5), 11)]
    op.process_watermark(100)  # b's timer fires too, but b was paid: nothing
    assert len(out.records) == 3


def test_keyed_co_process_state_and_timers_restore_into_the_subtasks_of_a_new_parallelism(
    backend, tmp_path
):
    op = co_operator(Match(), keyed=True)
    run(op, backend)
    keys = [f"k{i}" for i in range(40)]
    op.process_batch1(batch(*[((k, i), i) for i, k in enumerate(keys)]))
    restored = snapshot(op, tmp_path / "snap")
    op.close()
    outputs = []
    for subtask in range(3):  # rescale 1 -> 3: each subtask gets its key groups' state
        new = co_operator(Match(), keyed=True)
        out, side = run(new, backend, subtask=subtask, parallelism=3, restored=restored)
        assert new.keyed_backend.key_group_range == key_group_range(subtask, 3, M)
        groups = new.keyed_backend.key_group_range
        mine = [k for k in keys[:20] if assign_to_key_group(k, M) in groups]  # as partitioned
        new.process_batch2(batch(*[((k, 100), 50) for k in mine]))
        new.process_watermark(1000)
        outputs.append((out.values(), side.values()))
        new.close()
    joined = sorted(r for o, _ in outputs for r in o if r[0] != "timeout")
    timed_out = sorted(r for _, s in outputs for r in s)
    # every order's state is in exactly one subtask: paid ones join once, the others time out
    assert joined == sorted((k, i, 100) for i, k in enumerate(keys[:20]))
    assert timed_out == sorted((k, i) for i, k in enumerate(keys) if i >= 20)


# interval join ---------------------------------------------------------------------------
class Pair(ProcessJoinFunction):
    def process_element(self, left, right, ctx):
        assert isinstance(ctx, ProcessJoinFunction.Context)
        assert ctx.get_timestamp() == max(ctx.get_left_timestamp(), ctx.get_right_timestamp())
        yield (left, right, ctx.get_left_timestamp(), ctx.get_right_timestamp())


def join_operator(lower, upper, late_tags=(None, None)):
    sel = lambda v: v[0]  # noqa: E731
    return IntervalJoinOperator(Pair(), sel, sel, lower, upper, *late_tags, uid="ij", name="ij")


def reference(lefts, rights, lower, upper):
    return sorted(
        ((lv, rv, lt, rt), max(lt, rt))
        for lv, lt in lefts
        for rv, rt in rights
        if lv[0] == rv[0] and lt + lower <= rt <= lt + upper
    )


def test_interval_join_pairs_records_within_the_bounds_with_the_larger_timestamp(backend):
    op = join_operator(-2, 3)
    out, _ = run(op, backend)
    op.process_batch1(batch((("a", "L1"), 10)))
    op.process_batch2(batch((("a", "R1"), 7), (("a", "R2"), 8), (("a", "R3"), 13)))
    op.process_batch2(batch((("a", "R4"), 14), (("b", "R5"), 10)))
    op.process_batch1(batch((("a", "L2"), 12)))
    assert sorted(out.records) == reference(
        [(("a", "L1"), 10), (("a", "L2"), 12)],
        [(("a", "R1"), 7), (("a", "R2"), 8), (("a", "R3"), 13), (("a", "R4"), 14),
         (("b", "R5"), 10)],
        -2, 3,
    )  # fmt: skip


def test_interval_join_matches_a_brute_force_reference_on_random_out_of_order_input(backend):
    rng = random.Random(7)
    lower, upper, delay = -5, 8, 6
    op = join_operator(lower, upper)
    out, _ = run(op, backend)
    lefts, rights, max_ts = [], [], 0
    for step in range(400):
        ts = max(0, max_ts - rng.randrange(delay)) + rng.randrange(3)
        record = ((rng.choice("abcd"), step), ts)
        (lefts if step % 2 else rights).append(record)
        (op.process_batch1 if step % 2 else op.process_batch2)(batch(record))
        max_ts = max(max_ts, ts)
        if step % 7 == 0:
            op.process_watermark(max_ts - delay)
    op.finish()
    assert sorted(out.records) == reference(lefts, rights, lower, upper)
    # every bucket was cleaned up once the watermark passed it
    assert list(op.keyed_backend.entries("interval-join-left")) == []
    assert list(op.keyed_backend.entries("interval-join-right")) == []


def test_interval_join_cleans_buffers_when_the_watermark_passes_and_drops_late_records(backend):
    op = join_operator(0, 5)
    out, _ = run(op, backend)
    op.process_batch1(batch((("a", "L"), 10)))
    op.process_batch2(batch((("a", "R"), 12)))
    assert len(out.records) == 1
    op.process_watermark(14)  # the left bucket at 10 can still join a right record at 15
    assert [k for k, _ in op.keyed_backend.entries("interval-join-left")] == ["a"]
    op.process_watermark(16)  # a watermark of 15 says no record at or before 15 comes
    assert list(op.keyed_backend.entries("interval-join-left")) == []
    op.process_batch2(batch((("a", "late"), 15)))  # behind the watermark: dropped
    op.process_batch1(batch((("a", "L2"), 16)))
    assert [r[0][:2] for r in out.records] == [(("a", "L"), ("a", "R"))]


def test_interval_join_sends_late_records_of_a_side_to_its_late_data_side_output(backend):
    op = join_operator(0, 5, late_tags=(None, LATE))
    out, side = run(op, backend)
    op.process_watermark(20)
    op.process_batch1(batch((("a", "late-left"), 19)))  # no tag for the left side: dropped
    op.process_batch2(batch((("a", "late-right"), 18), (("a", "R"), 21)))
    assert side.records == [(("a", "late-right"), 18)]
    assert out.records == []


def test_interval_join_state_restores_and_keeps_joining(backend, tmp_path):
    op = join_operator(-3, 3)
    run(op, backend)
    op.process_batch1(batch((("a", "L"), 10), (("b", "L"), 10)))
    op.process_watermark(8)
    restored = snapshot(op, tmp_path / "snap")
    op.close()
    new = join_operator(-3, 3)
    out, _ = run(new, backend, restored=restored)
    new.process_batch2(batch((("a", "R"), 13), (("b", "R"), 14)))
    new.process_watermark(20)
    assert out.values() == [(("a", "L"), ("a", "R"), 10, 13)]
    assert list(new.keyed_backend.entries("interval-join-left")) == []


def test_interval_join_buffers_rescale_by_key_group_into_three_subtasks(backend, tmp_path):
    keys = [f"k{i}" for i in range(30)]
    op = join_operator(0, 10)
    run(op, backend)
    op.process_batch1(batch(*[((k, "L"), 100) for k in keys]))
    restored = snapshot(op, tmp_path / "snap")
    op.close()
    joined = []
    for subtask in range(3):
        new = join_operator(0, 10)
        out, _ = run(new, backend, subtask=subtask, parallelism=3, restored=restored)
        groups = new.keyed_backend.key_group_range
        mine = [k for k in keys if assign_to_key_group(k, M) in groups]  # as partitioned
        new.process_batch2(batch(*[((k, "R"), 105) for k in mine]))
        new.process_watermark(200)
        joined += out.values()
        assert list(new.keyed_backend.entries("interval-join-left")) == []
        new.close()
    # each key's buffered left record is in exactly one subtask: every key joins once
    assert sorted(joined) == sorted(((k, "L"), (k, "R"), 100, 105) for k in keys)


def test_interval_join_rejects_records_without_timestamps():
    op = join_operator(0, 1)
    run(op, None)
    with pytest.raises(ValueError, match="assign_timestamps_and_watermarks"):
        op.process_batch1([("a", 1)])


# API -------------------------------------------------------------------------------------
def sources():
    env = StreamExecutionEnvironment.get_execution_environment()
    return env, env.from_collection([("a", 1)]), env.from_collection([("a", 2)])


def test_connect_two_keyed_streams_builds_one_keyed_two_input_operator():
    _env, s1, s2 = sources()
    connected = s1.key_by(lambda v: v[0]).connect(s2.key_by(lambda v: v[0]))
    assert isinstance(connected, ConnectedStreams)
    result = connected.process(Match())
    t = result._transformation
    assert t.keyed and t.input_indices == (0, 1) and t.name == "KeyedCoProcess"
    assert all(p is not None for _, p in t.inputs)  # both inputs hashed by key


def test_connected_streams_key_by_keys_both_inputs():
    _env, s1, s2 = sources()
    t = s1.connect(s2).key_by(lambda v: v[0], lambda v: v[0]).map(Tag())._transformation
    assert t.keyed and t.kind == "co_map" and t.input_indices == (0, 1)


def test_unkeyed_connected_streams_map_and_flat_map_are_not_keyed():
    _env, s1, s2 = sources()
    assert not s1.connect(s2).map(Tag())._transformation.keyed
    assert not s1.connect(s2).flat_map(Repeat())._transformation.keyed


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda s1, s2: s1.connect(s2).process(Match()), TypeError, "two keyed streams"),
        (lambda s1, s2: s1.key_by(len).connect(s2).map(Tag()), ValueError, "only one"),
        (lambda s1, s2: s1.connect(s2).map(lambda v: v), TypeError, "CoMapFunction"),
        (lambda s1, s2: s1.connect(s2).process(Pair()), TypeError, "CoProcessFunction"),
        (lambda s1, s2: s1.connect(42), TypeError, "connect\\(\\) takes a DataStream"),
        (lambda s1, s2: s1.key_by(len).interval_join(s2), TypeError, "KeyedStream"),
        (
            lambda s1, s2: s1.key_by(len).interval_join(s2.key_by(len)).between(5, 1),
            ValueError,
            "must not be above",
        ),
        (
            lambda s1, s2: (
                s1.key_by(len)
                .interval_join(s2.key_by(len))
                .between(Time.milliseconds(1), Time.milliseconds(1))
                .lower_bound_exclusive()
                .process(Pair())
            ),
            ValueError,
            "no timestamp",
        ),
        (
            lambda s1, s2: s1.key_by(len).interval_join(s2.key_by(len)).between(0, 1).process(1),
            TypeError,
            "ProcessJoinFunction",
        ),
    ],
)
def test_connected_streams_and_interval_join_reject_bad_use_clearly(build, error, match):
    _env, s1, s2 = sources()
    with pytest.raises(error, match=match):
        build(s1, s2)


def test_interval_join_builds_a_keyed_two_input_operator_with_inclusive_bounds():
    _env, s1, s2 = sources()
    joined = (
        s1.key_by(len)
        .interval_join(s2.key_by(len))
        .between(Time.milliseconds(-2), Time.seconds(1))
        .upper_bound_exclusive()
        .process(Pair())
    )
    t = joined._transformation
    assert t.keyed and t.input_indices == (0, 1) and t.kind == "interval_join"
    op = t.make_operator()
    assert (op.lower_bound, op.upper_bound) == (-2, 999)
    assert op.late_tags == (None, None)


def test_interval_join_late_data_side_outputs_reach_the_operator():
    _env, s1, s2 = sources()
    joined = (
        s1.key_by(len)
        .interval_join(s2.key_by(len))
        .between(0, 1)
        .side_output_left_late_data(LATE)
        .process(Pair())
    )
    assert joined._transformation.make_operator().late_tags == (LATE, None)
    late = joined.get_side_output(LATE)._transformation
    assert (late.kind, late.name) == ("side_output", "SideOutput: unmatched")
    assert late.inputs == [(joined._transformation, None)]
    assert late.make_operator().side_output_tag == "unmatched"
    with pytest.raises(TypeError, match="OutputTag"):
        s1.key_by(len).interval_join(s2.key_by(len)).between(0, 1).side_output_right_late_data(1)


class Ping(KeyedCoProcessFunction):
    """Input 2 sets a processing-time timer that is due at once; it reports its key."""

    def process_element1(self, value, ctx):
        return None

    def process_element2(self, value, ctx):
        now = ctx.timer_service().current_processing_time()
        ctx.timer_service().register_processing_time_timer(now)

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), ctx.time_domain().name)


def test_keyed_co_process_processing_time_timers_fire_with_their_key_current(backend):
    op = co_operator(Ping(), keyed=True)
    out, _ = run(op, backend)
    op.process_batch2([("a", 1), ("b", 2)])
    op.timers.fire_processing_timers()  # what the task's loop does between batches
    assert sorted(out.values()) == [("a", "PROCESSING_TIME"), ("b", "PROCESSING_TIME")]

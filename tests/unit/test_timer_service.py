"""Timers of keyed process functions: registration, deduplication, deletion, firing order,
firing per key with the key's state, storage in keyed state (snapshot, restore, rescale), end
of input, and clear errors. Real operators on real backends (hashmap and rocksdb, parametrised),
with an injected clock."""

from __future__ import annotations

import pytest

from tidegate.datastream import (
    KeyedProcessFunction,
    ProcessFunction,
    TimeDomain,
    TimerService,
)
from tidegate.datastream.state import ValueStateDescriptor
from tidegate.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from tidegate.datastream.time_domain import TimeDomain as TimeDomainAtPyFlinkPath
from tidegate.datastream.timerservice import TimerService as TimerServiceAtPyFlinkPath
from tidegate.runtime.internal_timers import MAX_WATERMARK, MIN_WATERMARK, TIMER_STATE
from tidegate.runtime.operators import OperatorRuntime, ProcessOperator
from tidegate.runtime.timer_service import ChainTimers
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.keygroups import KeyGroupAssigner
from tidegate.state.rocksdb_backend import RocksDBKeyedStateBackend
from tidegate.state.snapshot_format import read_key_groups

M = 128
EVENT, PROCESSING = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME
KEYED_BACKENDS = {"hashmap": HeapKeyedStateBackend, "rocksdb": RocksDBKeyedStateBackend}


class Collect:
    """A downstream operator that keeps every record it is given."""

    def __init__(self) -> None:
        self.records: list = []

    def process_batch(self, records: list) -> None:
        self.records.extend(records)


class Clock:
    def __init__(self, now: int = 1_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class TimerFunction(KeyedProcessFunction):
    """Records are `(key, command, timestamp)`; commands set and delete timers. It counts the
    records of each key in keyed state; on_timer emits `(key, ts, domain, count)`."""

    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        _key, command, ts = value
        self.count.update((self.count.value() or 0) + 1)
        timers: TimerService = ctx.timer_service()
        getattr(timers, command)(ts)
        return None

    def on_timer(self, timestamp, ctx):
        assert ctx.timestamp() == timestamp
        yield (ctx.get_current_key(), timestamp, ctx.time_domain(), self.count.value())


@pytest.fixture(params=["hashmap", "rocksdb"])
def backend_type(request) -> str:
    return request.param


@pytest.fixture
def keyed_operator(backend_type, tmp_path):
    """Creates keyed process operators on the parametrised backend; rocksdb ones are disposed
    after the test."""
    created: list[ProcessOperator] = []

    def make(
        function=None,
        *,
        subtask: int = 0,
        parallelism: int = 1,
        restored=None,
        clock=None,
        batch: bool = False,
    ) -> tuple[ProcessOperator, Collect]:
        if backend_type == "hashmap":
            state_backend = HashMapStateBackend()
        else:
            state_backend = EmbeddedRocksDBStateBackend(local_dir=str(tmp_path / "rocksdb"))
        function = function or TimerFunction()
        op = ProcessOperator(
            function, function.process_element, lambda r: r[0], uid=f"timers{len(created)}"
        )
        runtime = OperatorRuntime(
            subtask, parallelism, M, 0, state_backend=state_backend, batch=batch
        )
        op.initialize_state(runtime, None)
        created.append(op)
        if restored is not None:
            op.keyed_backend.restore(restored(op.keyed_backend.key_group_range))
        out = Collect()
        op.outputs = [out]
        op.open()
        op.timers.internal.clock = clock or Clock()
        return op, out

    yield make
    for op in created:
        if hasattr(op.keyed_backend, "dispose"):
            op.keyed_backend.dispose()


REGISTER_P, REGISTER_E = "register_processing_time_timer", "register_event_time_timer"


def test_an_operator_whose_timers_never_fire_holds_no_timer_state(keyed_operator):
    # its snapshots (and the State Processor API, tidegate check-restore) show no `__timers__`
    op, _ = keyed_operator()
    op.timers.fire_processing_timers()
    op.on_watermark(5_000)
    assert TIMER_STATE not in op.keyed_backend.snapshot(None).state_kinds


def test_a_processing_time_timer_fires_once_the_clock_reaches_it_with_the_keys_state(
    keyed_operator,
):
    clock = Clock(1_000)
    op, out = keyed_operator(clock=clock)
    op.process_batch([("a", REGISTER_P, 1_500), ("a", REGISTER_P, 1_200), ("b", REGISTER_P, 1_300)])
    op.timers.fire_processing_timers()
    assert out.records == []
    clock.now = 1_300
    op.timers.fire_processing_timers()
    assert out.records == [("a", 1_200, PROCESSING, 2), ("b", 1_300, PROCESSING, 1)]
    clock.now = 10_000
    op.timers.fire_processing_timers()
    assert out.records[2:] == [("a", 1_500, PROCESSING, 2)]
    assert list(op.keyed_backend.entries(TIMER_STATE)) == []


def test_timers_are_deduplicated_per_key_timestamp_and_domain(keyed_operator):
    op, out = keyed_operator(clock=Clock(0))
    op.process_batch(
        [
            ("a", REGISTER_E, 5),
            ("a", REGISTER_E, 5),  # the same timer
            ("a", REGISTER_P, 5),  # another domain: another timer
            ("b", REGISTER_E, 5),  # another key: another timer
        ]
    )
    assert sorted(op.timers.internal.pending(EVENT)) == [(5, "a"), (5, "b")]
    op.timers.advance_watermark(5)
    op.timers.internal.clock.now = 5
    op.timers.fire_processing_timers()
    assert sorted(out.records, key=str) == sorted(
        [("a", 5, EVENT, 3), ("b", 5, EVENT, 1), ("a", 5, PROCESSING, 3)], key=str
    )


def test_a_deleted_timer_does_not_fire_and_leaves_the_state(keyed_operator):
    op, out = keyed_operator(clock=Clock(0))
    op.process_batch(
        [
            ("a", REGISTER_E, 7),
            ("a", REGISTER_E, 8),
            ("a", "delete_event_time_timer", 7),
            ("a", "delete_event_time_timer", 99),  # no such timer: nothing happens
            ("b", REGISTER_P, 3),
            ("b", "delete_processing_time_timer", 3),
        ]
    )
    assert list(op.keyed_backend.entries(TIMER_STATE)) == [("a", {(EVENT.value, 8): True})]
    op.timers.advance_watermark(100)
    op.timers.internal.clock.now = 100
    op.timers.fire_processing_timers()
    assert out.records == [("a", 8, EVENT, 4)]  # "a" had 4 records


def test_a_timer_registered_again_after_its_deletion_fires_once(keyed_operator):
    op, out = keyed_operator(clock=Clock(0))
    op.process_batch(
        [("a", REGISTER_E, 7), ("a", "delete_event_time_timer", 7), ("a", REGISTER_E, 7)]
    )
    op.timers.advance_watermark(7)
    op.timers.advance_watermark(8)
    assert out.records == [("a", 7, EVENT, 3)]


def test_event_time_timers_fire_in_timestamp_order_up_to_the_watermark_only(keyed_operator):
    op, out = keyed_operator()
    op.process_batch(
        [(k, REGISTER_E, ts) for k, ts in [("a", 30), ("b", 10), ("c", 20), ("d", 40)]]
    )
    op.timers.advance_watermark(30)
    assert [(k, ts) for k, ts, _, _ in out.records] == [("b", 10), ("c", 20), ("a", 30)]
    op.timers.advance_watermark(25)  # watermarks never go back
    assert op.timers.service.current_watermark() == 30
    assert op.timers.internal.pending(EVENT) == [(40, "d")]


def test_a_timer_set_in_on_timer_at_or_before_the_watermark_fires_in_the_same_advance(
    keyed_operator,
):
    class Chain(TimerFunction):
        def on_timer(self, timestamp, ctx):
            if timestamp < 3:
                ctx.timer_service().register_event_time_timer(timestamp + 1)
            yield (ctx.get_current_key(), timestamp)

    op, out = keyed_operator(Chain())
    op.process_batch([("k", REGISTER_E, 0)])
    op.timers.advance_watermark(10)
    assert out.records == [("k", 0), ("k", 1), ("k", 2), ("k", 3)]


def test_timers_live_in_keyed_state_and_are_rebuilt_after_a_restore(keyed_operator, tmp_path):
    op, _ = keyed_operator(clock=Clock(0))
    op.process_batch([("a", REGISTER_E, 5), ("b", REGISTER_P, 9), ("a", REGISTER_P, 9)])
    path = tmp_path / "timers.state"
    with path.open("wb") as f:
        index = op.keyed_backend.snapshot().write(f)

    def restored(key_groups):
        f = path.open("rb")
        return read_key_groups(f, index, key_groups)

    clock = Clock(9)
    again, out = keyed_operator(restored=restored, clock=clock)
    assert again.timers.internal.pending(EVENT) == [(5, "a")]
    assert sorted(again.timers.internal.pending(PROCESSING)) == [(9, "a"), (9, "b")]
    again.timers.fire_processing_timers()
    again.timers.advance_watermark(5)
    assert sorted(out.records, key=str) == sorted(
        [("a", 9, PROCESSING, 2), ("b", 9, PROCESSING, 1), ("a", 5, EVENT, 2)], key=str
    )


def test_a_snapshot_taken_after_a_timer_fired_does_not_hold_it(keyed_operator, tmp_path):
    op, _ = keyed_operator()
    op.process_batch([("a", REGISTER_E, 5), ("a", REGISTER_E, 6)])
    op.timers.advance_watermark(5)
    path = tmp_path / "after.state"
    with path.open("wb") as f:
        index = op.keyed_backend.snapshot().write(f)
    with path.open("rb") as f:
        stored = {n: e for _, d in read_key_groups(f, index, range(M)) for n, (_, e) in d.items()}
    assert stored[TIMER_STATE] == {"a": {(EVENT.value, 6): True}}


def test_rescaling_moves_each_timer_to_the_subtask_that_owns_its_key_group(
    keyed_operator, tmp_path
):
    keys = [f"key-{i}" for i in range(200)]
    assigner = KeyGroupAssigner(M)
    files = []
    for i in range(2):  # Step 1: two subtasks, each with timers for its own keys
        op, _ = keyed_operator(subtask=i, parallelism=2)
        owned = op.keyed_backend.key_group_range
        op.process_batch(
            [(k, REGISTER_E, n) for n, k in enumerate(keys) if assigner.key_group(k) in owned]
        )
        path = tmp_path / f"old-{i}.state"
        with path.open("wb") as f:
            files.append((path, op.keyed_backend.snapshot().write(f)))

    def restored(key_groups):
        for path, index in files:
            yield from read_key_groups(path.open("rb"), index, key_groups)

    fired: list = []
    for j in range(3):  # Step 2: three subtasks fire exactly the timers of their key groups
        op, out = keyed_operator(subtask=j, parallelism=3, restored=restored)
        op.timers.end_of_input()
        owned = op.keyed_backend.key_group_range
        assert all(assigner.key_group(k) in owned for k, _, _, _ in out.records)
        fired.extend((k, ts) for k, ts, _, _ in out.records)
    assert sorted(fired) == sorted((k, n) for n, k in enumerate(keys))


def test_at_the_end_of_input_event_time_timers_fire_and_processing_time_timers_do_not(
    keyed_operator,
):
    clock = Clock(0)
    op, out = keyed_operator(clock=clock)
    op.process_batch([("a", REGISTER_E, 10**15), ("a", REGISTER_P, 50), ("b", REGISTER_E, 3)])
    op.finish()
    assert out.records == [("b", 3, EVENT, 1), ("a", 10**15, EVENT, 2)]
    assert op.timers.service.current_watermark() == MAX_WATERMARK
    clock.now = 100  # processing time is quiesced after the end of input
    op.timers.fire_processing_timers()
    assert len(out.records) == 2
    assert ChainTimers([op]).fire_due() is None


def test_in_batch_mode_processing_time_timers_fire_only_at_the_end_with_the_event_time_ones(
    keyed_operator,
):
    clock = Clock(0)
    op, out = keyed_operator(clock=clock, batch=True)
    op.process_batch([("a", REGISTER_P, 50), ("b", REGISTER_E, 3), ("a", REGISTER_P, 10**15)])
    clock.now = 100  # due, but a batch job's processing-time timers wait for the end
    op.timers.fire_processing_timers()
    assert ChainTimers([op]).fire_due() is None
    op.timers.advance_watermark(5)  # (a batch job has no watermark before the end)
    assert out.records == [("b", 3, EVENT, 1)]
    op.timers.advance_watermark(MAX_WATERMARK)
    assert out.records[1:] == [("a", 50, PROCESSING, 2), ("a", 10**15, PROCESSING, 2)]


def test_the_chain_hook_fires_due_timers_and_says_how_long_to_wait_for_the_next(keyed_operator):
    clock = Clock(1_000)
    op, out = keyed_operator(clock=clock)
    chain = ChainTimers([op])
    assert chain and chain.fire_due() is None
    op.process_batch([("a", REGISTER_P, 1_250), ("b", REGISTER_P, 1_100)])
    assert chain.fire_due() == pytest.approx(0.1)
    clock.now = 1_100
    assert chain.fire_due() == pytest.approx(0.15)
    assert out.records == [("b", 1_100, PROCESSING, 1)]
    assert not ChainTimers([object()])


def test_the_timer_service_reads_both_clocks_and_is_pyflinks_timer_service(keyed_operator):
    op, _ = keyed_operator(clock=Clock(42))
    service = op.process_context.timer_service()
    assert isinstance(service, TimerService)
    assert service.current_processing_time() == 42
    assert service.current_watermark() == MIN_WATERMARK
    assert TimeDomainAtPyFlinkPath is TimeDomain and TimerServiceAtPyFlinkPath is TimerService
    assert isinstance(op.timers.context, KeyedProcessFunction.OnTimerContext)
    assert [d.value for d in TimeDomain] == [0, 1]  # PyFlink's values


def test_timers_in_a_non_keyed_process_function_fail_with_a_clear_error():
    class NonKeyed(ProcessFunction):
        def process_element(self, value, ctx):
            assert ctx.timer_service().current_processing_time() > 0
            ctx.timer_service().register_event_time_timer(value)

    function = NonKeyed()
    op = ProcessOperator(function, function.process_element, None)
    op.initialize_state(OperatorRuntime(0, 1, M, 0), None)
    op.outputs = [Collect()]
    op.open()
    assert op.timers is None
    with pytest.raises(RuntimeError, match=r"timers need a keyed stream.*key_by"):
        op.process_batch([1])


def test_a_timestamp_that_is_not_an_int_is_refused_with_the_fix(keyed_operator):
    op, _ = keyed_operator()
    with pytest.raises(TypeError, match=r"int of milliseconds.*int\(seconds \* 1000\)"):
        op.process_batch([("a", REGISTER_E, 1.5)])
    with pytest.raises(ValueError, match="64-bit"):
        op.process_batch([("a", REGISTER_E, 2**63)])


def test_setting_a_timer_without_a_current_key_is_an_error(keyed_operator):
    op, _ = keyed_operator()
    op.keyed_backend.current_key = None
    with pytest.raises(RuntimeError, match="while a key is current"):
        op.timers.service.register_event_time_timer(1)


def test_many_deleted_timers_do_not_accumulate_in_memory(keyed_operator):
    op, out = keyed_operator()
    for ts in range(1_000):
        op.process_batch([("a", REGISTER_E, ts), ("a", "delete_event_time_timer", ts)])
    assert len(op.timers.internal._queues[EVENT]) <= 65
    op.timers.end_of_input()
    assert out.records == []


def test_entries_lists_every_key_of_a_state_and_nothing_for_an_unknown_one(
    keyed_operator, backend_type
):
    backend = keyed_operator()[0].keyed_backend
    assert type(backend) is KEYED_BACKENDS[backend_type]
    state = backend.get_state(ValueStateDescriptor("v"))
    for key in ("x", "y"):
        backend.current_key = key
        state.update(key.upper())
    assert sorted(backend.entries("v")) == [("x", "X"), ("y", "Y")]
    assert list(backend.entries("unknown")) == []


def test_registering_timers_in_one_call_is_registering_them_one_by_one(keyed_operator):
    """register_all (the batched window paths): same dedup, state, firing order, and checks."""
    timers = [(30, "a"), (10, "b"), (30, "a"), (10, "a"), (30, "b"), (10, "b"), (20, "c")]
    one, _ = keyed_operator()
    for ts, key in timers:
        one.keyed_backend.current_key = key
        one.timers.internal.register(EVENT, ts)
    many, _ = keyed_operator()
    many.timers.internal.register_all(EVENT, timers)
    assert dict(many.keyed_backend.entries(TIMER_STATE)) == dict(
        one.keyed_backend.entries(TIMER_STATE)
    )
    assert many.timers.internal.pop_event_timers(MAX_WATERMARK) == (
        one.timers.internal.pop_event_timers(MAX_WATERMARK)
    )
    with pytest.raises(TypeError, match="int of milliseconds"):
        many.timers.internal.register_all(EVENT, [(1.5, "a")])
    with pytest.raises(ValueError, match="64-bit"):
        many.timers.internal.register_all(EVENT, [(2**63, "a")])


def test_deleting_most_timers_compacts_the_queue_and_the_rest_fire_in_order(keyed_operator):
    clock = Clock(0)
    op, out = keyed_operator(clock=clock)
    keys = [f"k{i}" for i in range(100)]
    op.process_batch([(k, REGISTER_P, 1_000 + i % 7) for i, k in enumerate(keys)])
    op.process_batch([(k, "delete_processing_time_timer", 1_000 + i % 7) for i, k in
                      enumerate(keys) if i % 10])  # fmt: skip
    queue = op.timers.internal._queues[PROCESSING]
    assert len(queue) < 60  # compacted: deleted timers went from the queue too, not only live
    assert op.timers.internal.next_processing_time() == 1_000  # k0's
    clock.now = 2_000
    op.timers.fire_processing_timers()
    kept = [(k, 1_000 + i % 7) for i, k in enumerate(keys) if i % 10 == 0]
    assert [(k, ts) for k, ts, _, _ in out.records] == sorted(kept, key=lambda kt: kt[1])
    assert op.timers.internal.next_processing_time() is None


def test_the_next_processing_time_skips_deleted_timers_at_the_head(keyed_operator):
    op, _ = keyed_operator(clock=Clock(0))
    op.process_batch([("a", REGISTER_P, 10), ("b", REGISTER_P, 10), ("c", REGISTER_P, 30)])
    op.process_batch([("a", "delete_processing_time_timer", 10)])
    assert op.timers.internal.next_processing_time() == 10  # b's
    op.process_batch([("b", "delete_processing_time_timer", 10)])
    assert op.timers.internal.next_processing_time() == 30


def test_a_firing_timer_that_deletes_most_timers_and_registers_a_due_one(keyed_operator):
    """Deleting most timers in on_timer compacts the queue being fired from; the timer it
    registers at the watermark still fires in the same advance, the deleted ones never."""

    class Purge(TimerFunction):
        def on_timer(self, timestamp, ctx):
            timers = ctx.timer_service()
            if timestamp == 1:
                for ts in range(2, 100):
                    timers.delete_event_time_timer(ts)
                timers.register_event_time_timer(50)
            yield (ctx.get_current_key(), timestamp)

    op, out = keyed_operator(Purge())
    op.process_batch([("k", REGISTER_E, ts) for ts in range(1, 100)] + [("k", REGISTER_E, 200)])
    op.timers.advance_watermark(150)
    assert out.records == [("k", 1), ("k", 50)]
    op.timers.advance_watermark(300)
    assert out.records == [("k", 1), ("k", 50), ("k", 200)]

"""Two-input jobs for the end-to-end tests (connect / interval join), and the plain-Python
reference of their output.

Both jobs read two datagen sources of two subtasks each, in event time with bounded
out-of-orderness (tests/e2e/event_time_jobs.py's `record(i, n)`: timestamps of both halves
advance together, jitter within the bound, so no record is ever late).

* `order_job`: orders `(i, amount, ts)` and payments, keyed by order id, connected and
  matched by `Match` (a KeyedCoProcessFunction with ValueState on both sides and event-time
  timeouts). Order `i` with `i % 4 != 0` has a payment at most 40 ms after it: the line
  `J,i,amount,paid`. Order `i % 4 == 0` has none: `T,i,timeout` when its timer fires, and the
  payment source's record `i` pays an order that never comes (key `-i-1`): `U,-i-1,timeout`.
  The payment source runs at half the rate of the orders: if the operator's watermark were
  not the minimum of both inputs, timeouts would fire before their payments arrived.
* `interval_job`: lefts `record(i)` and rights `record(j)` with key `(3 j) % KEYS`, joined by
  `interval_join(...).between(-30 ms, 50 ms).upper_bound_exclusive()`: `l,r,max(ts)` lines.
"""

from __future__ import annotations

import bisect
import collections
from pathlib import Path

from tests.e2e.event_time_jobs import BOUND_MS, KEYS, ThirdField, record
from tests.e2e.timer_jobs import FailurePlan
from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tidegate.common import Duration, WatermarkStrategy
from tidegate.common.time import Time
from tidegate.datastream import EmbeddedRocksDBStateBackend, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    ProcessJoinFunction,
)
from tidegate.datastream.state import MapStateDescriptor, ValueStateDescriptor

TIMEOUT_MS = 100
LOWER_MS, UPPER_MS = -30, 50  # the upper bound is exclusive


def order(i: int, n: int) -> tuple[int, int, int]:
    return i, (i * 37) % 101, record(i, n)[2]


def payment(i: int, n: int) -> tuple[int, int, int]:
    ts = record(i, n)[2] + (i % 5) * 10
    return (i if i % 4 else -i - 1), i % 7 + 1, ts


class Gen:
    """A source's generator (picklable): `kind(i, n)`."""

    def __init__(self, kind, n: int) -> None:
        self.kind, self.n = kind, n

    def __call__(self, i: int):
        return self.kind(i, self.n)


def right(j: int, n: int) -> tuple[int, int, int]:
    _key, _, ts = record(j, n)
    return (3 * j) % KEYS, j, ts


class Match(KeyedCoProcessFunction):
    def __init__(self, plan: FailurePlan) -> None:
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.order = runtime_context.get_state(ValueStateDescriptor("order"))
        self.paid = runtime_context.get_state(ValueStateDescriptor("paid"))
        self.attempt = runtime_context.get_attempt_number()

    def process_element1(self, value, ctx):
        i, amount, ts = value
        assert ctx.timestamp() == ts and ctx.get_current_key() == i
        if self.paid.value() is not None:
            yield f"J,{i},{amount},{self.paid.value()}"
            self.paid.clear()
        else:
            self.order.update(amount)
            ctx.timer_service().register_event_time_timer(ts + TIMEOUT_MS)
        self.plan.fire(self.attempt, "record", i)

    def process_element2(self, value, ctx):
        key, paid, ts = value
        if self.order.value() is not None:
            yield f"J,{key},{self.order.value()},{paid}"
            self.order.clear()
        else:
            self.paid.update(paid)
            ctx.timer_service().register_event_time_timer(ts + TIMEOUT_MS)

    def on_timer(self, timestamp, ctx):
        key = ctx.get_current_key()
        self.plan.fire(self.attempt, "timer", key)
        if self.order.value() is not None:
            self.order.clear()
            yield f"T,{key},{timestamp}"
        if self.paid.value() is not None:
            self.paid.clear()
            yield f"U,{key},{timestamp}"


class Pair(ProcessJoinFunction):
    def __init__(self, plan: FailurePlan) -> None:
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def process_element(self, left, right, ctx):
        self.plan.fire(self.attempt, "record", left[1])
        yield f"{left[1]},{right[1]},{ctx.get_timestamp()}"


class Tag(CoMapFunction):
    def map1(self, value):
        return f"a,{value}"

    def map2(self, value):
        return f"b,{value}"


class Split(CoFlatMapFunction):
    def __init__(self, plan: FailurePlan) -> None:
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()

    def flat_map1(self, value):
        self.plan.fire(self.attempt, "record", value)
        for d in range(value % 3):
            yield f"c,{value},{d}"

    def flat_map2(self, value):
        yield f"d,{value}"


def _env(checkpoints: Path, restore_path: str | None, interval_ms: int = 200):
    return job_environment(
        "spark",
        checkpoints,
        interval_ms=interval_ms,
        restore_path=restore_path,
        watermark_interval_ms=100,
    )


def _event_source(env, generator, n: int, rate: float, name: str):
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(BOUND_MS)
    ).with_timestamp_assigner(ThirdField())
    source = DataGeneratorSource(generator, count=n, records_per_second=rate)
    return env.from_source(source, strategy, name).uid(name)


def order_job(
    out: Path,
    checkpoints: Path,
    *,
    n: int,
    rate: float,
    plan: FailurePlan | None = None,
    parallelism: int = 2,
    restore_path: str | None = None,
    rocksdb_dir: Path | None = None,
    unaligned: bool = False,
) -> StreamExecutionEnvironment:
    """orders (2) and payments (2, half the rate) -> key_by id each -> connect -> Match
    (uid `match`, `parallelism`) -> FileSink; on rocksdb if `rocksdb_dir` is given."""
    env = _env(checkpoints, restore_path)
    env.get_checkpoint_config().enable_unaligned_checkpoints(unaligned)
    if rocksdb_dir is not None:
        env.set_state_backend(EmbeddedRocksDBStateBackend(local_dir=str(rocksdb_dir)))
    orders = _event_source(env, Gen(order, n), n, rate, "orders")
    payments = _event_source(env, Gen(payment, n), n, rate / 2, "payments")
    keyed = orders.key_by(lambda r: r[0]).connect(payments.key_by(lambda r: r[0]))
    matched = keyed.process(Match(plan or FailurePlan())).uid("match")
    matched.set_parallelism(parallelism)
    matched.sink_to(file_sink(out)).uid("sink")
    return env


def order_reference(n: int) -> list[str]:
    lines = []
    for i in range(n):
        _, amount, ts = order(i, n)
        key, paid, pts = payment(i, n)
        if key == i:
            lines.append(f"J,{i},{amount},{paid}")
        else:
            lines += [f"T,{i},{ts + TIMEOUT_MS}", f"U,{key},{pts + TIMEOUT_MS}"]
    return sorted(lines)


def interval_job(
    out: Path, checkpoints: Path, *, n: int, rate: float, plan: FailurePlan | None = None
) -> StreamExecutionEnvironment:
    """lefts (2) and rights (2) -> key_by key each -> interval join (uid `join`) -> FileSink."""
    env = _env(checkpoints, None)
    lefts = _event_source(env, Gen(record, n), n, rate, "lefts").key_by(lambda r: r[0])
    rights = _event_source(env, Gen(right, n), n, rate, "rights").key_by(lambda r: r[0])
    joined = (
        lefts.interval_join(rights)
        .between(Time.milliseconds(LOWER_MS), Time.milliseconds(UPPER_MS))
        .upper_bound_exclusive()
        .process(Pair(plan or FailurePlan()))
        .uid("join")
    )
    joined.sink_to(file_sink(out)).uid("sink")
    return env


def interval_reference(n: int) -> list[str]:
    by_key: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for j in range(n):
        key, _, ts = right(j, n)
        by_key[key].append((ts, j))
    for rights in by_key.values():
        rights.sort()
    lines = []
    for i in range(n):
        key, _, lt = record(i, n)
        rights = by_key[key]
        start = bisect.bisect_left(rights, (lt + LOWER_MS, -1))
        for rt, j in rights[start:]:
            if rt >= lt + UPPER_MS:
                break
            lines.append(f"{i},{j},{max(lt, rt)}")
    return sorted(lines)


class Mark(CoProcessFunction):
    """Non-keyed: `e,v` and `f,v` lines, each with the record's side."""

    def process_element1(self, value, ctx):
        yield f"e,{value}"

    def process_element2(self, value, ctx):
        yield f"f,{value}"


SEEN = MapStateDescriptor("seen")


class CountBroadcasts(BroadcastProcessFunction):
    """Non-keyed: `g,v` per record; per broadcast record `h,subtask,v,count`, `count` the
    broadcast records this subtask's broadcast state has counted so far (checkpointed)."""

    def open(self, runtime_context) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value, ctx):
        yield f"g,{value}"

    def process_broadcast_element(self, value, ctx):
        seen = ctx.get_broadcast_state(SEEN)
        count = (seen.get("count") or 0) + 1
        seen.put("count", count)
        yield f"h,{self.subtask},{value},{count}"


def co_map_job(
    out: Path, out2: Path, out3: Path, checkpoints: Path, *, n: int, rate: float, plan: FailurePlan
) -> StreamExecutionEnvironment:
    """numbers a (2) and b (1) -> connect -> CoMap -> FileSink; -> CoFlatMap -> FileSink; and
    -> CoProcessFunction, a -> connect(b broadcast) -> BroadcastProcessFunction -> FileSink."""
    env = _env(checkpoints, None)
    a = env.from_source(DataGeneratorSource(lambda i: i, n, rate), None, "a").uid("a")
    b = env.from_source(DataGeneratorSource(lambda i: -i, n, rate), None, "b").uid("b")
    b = b.set_parallelism(1)
    a.connect(b).map(Tag()).uid("tag").sink_to(file_sink(out)).uid("sink")
    a.connect(b).flat_map(Split(plan)).uid("split").sink_to(file_sink(out2)).uid("sink2")
    marked = a.connect(b).process(Mark()).uid("mark")
    counted = a.connect(b.broadcast(SEEN)).process(CountBroadcasts()).uid("broadcasts")
    marked.union(counted).sink_to(file_sink(out3)).uid("sink3")
    return env


def co_map_reference(n: int) -> tuple[list[str], list[str], list[str]]:
    tagged = [f"a,{i}" for i in range(n)] + [f"b,{-i}" for i in range(n)]
    split = [f"c,{i},{d}" for i in range(n) for d in range(i % 3)] + [f"d,{-i}" for i in range(n)]
    processed = [f"e,{i}" for i in range(n)] + [f"f,{-i}" for i in range(n)]
    processed += [f"g,{i}" for i in range(n)]
    processed += [f"h,{s},{-i},{i + 1}" for s in range(2) for i in range(n)]
    return sorted(tagged), sorted(split), sorted(processed)


def lines(out: Path | list[Path]) -> list[str]:
    """The committed lines of one output directory or several, sorted."""
    return sorted(committed_lines(*(out if isinstance(out, list) else [out])))

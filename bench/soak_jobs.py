"""The soak's job (bench/soak.py): four pipelines in one job graph, each into a row-format
FileSink, whose committed lines are the same at any parallelism and in any run, and their
references computed here in plain Python from the input alone.

Every source generates the values 0..n-1 (`DataGeneratorSource`, at `rate` records/s; None:
as fast as it can):

- `keyed` (sink 0): values keyed by `v % KEYS`, a running count in ValueState: `key,count`
  lines, `1..n_k` per key whatever order the parallel source readers interleave in;
- `windows` (sink 1): event time `v * STEP_MS` (one reader at parallelism 1, monotonous
  timestamps), keyed by `v % WINDOW_KEYS`, tumbling WINDOW_MS windows summed (a reduce with a
  process window function): `key,window_start,sum,count`;
- `broadcast` (sink 2): rules `(r, factor(r))` from a source at parallelism 1 broadcast to the
  values keyed by `v % KEYS`; value v needs rule `v % RULES` and waits in keyed list state until
  it arrived (`apply_to_keyed_state` flushes it then): `key,v,v*factor` lines;
- `join` (sink 3): lefts and rights (each one reader, event time `v * STEP_MS`) keyed by
  `v % JOIN_KEYS`, interval-joined within +-JOIN_BOUND_MS: `left,right` lines.

The keyed operators run at the job's parallelism (rescaled between the soak's segments); keyed,
window, join and list state, broadcast state, timers and source splits all restore across it.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import cloudpickle

from tidegate.common import Encoder, WatermarkStrategy
from tidegate.common.time import Time
from tidegate.datastream import (
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink
from tidegate.datastream.functions import ProcessJoinFunction, ProcessWindowFunction
from tidegate.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from tidegate.datastream.window import TumblingEventTimeWindows

KEYS = 32
STEP_MS = 5
WINDOW_KEYS = 8
WINDOW_MS = 400
RULES = 7
JOIN_KEYS = 2
JOIN_BOUND_MS = 10
#: the sinks, in the order the job adds them (the chaos run's sinks/<n>)
PIPELINES = ("keyed", "windows", "broadcast", "join")
#: the job's sinks write here until the chaos run moves them: not writable, so the job runs
#: only if it was moved
NOWHERE = "/nonexistent/moved-by-the-soak"

RULE_STATE = MapStateDescriptor("rules")
PENDING = ListStateDescriptor("pending")


def register_by_value() -> None:
    """Pickle this module's functions by value (slots cannot import `bench`)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def identity(i: int) -> int:
    return i


def event_time(value: int, _record_timestamp: int) -> int:
    return value * STEP_MS


def factor(rule: int) -> int:
    return rule + 2


def rule(i: int) -> tuple[int, int]:
    return i % RULES, factor(i % RULES)


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value: int, ctx: Any) -> Any:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield f"{value % KEYS},{count}"


class WindowSum(ProcessWindowFunction):
    """The reduced (sum, count) of a window as one line."""

    def process(self, key: int, context: Any, elements: Any) -> Any:
        total, count = next(iter(elements))
        yield f"{key},{context.window().start},{total},{count}"


def add_pairs(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


class ApplyRules(KeyedBroadcastProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.pending = runtime_context.get_list_state(PENDING)

    def process_element(self, value: int, ctx: Any) -> Any:
        known = ctx.get_broadcast_state(RULE_STATE).get(value % RULES)
        if known is None:
            self.pending.add(value)
        else:
            yield f"{value % KEYS},{value},{value * known}"

    def process_broadcast_element(self, value: tuple[int, int], ctx: Any) -> Any:
        rules = ctx.get_broadcast_state(RULE_STATE)
        rules.put(*value)
        out: list[str] = []

        def flush(key: int, pending: Any) -> None:
            waiting = []
            for v in pending.get():
                known = rules.get(v % RULES)
                if known is None:
                    waiting.append(v)
                else:
                    out.append(f"{v % KEYS},{v},{v * known}")
            pending.update(waiting)

        ctx.apply_to_keyed_state(PENDING, flush)
        yield from out


class Pair(ProcessJoinFunction):
    def process_element(self, left: int, right: int, ctx: Any) -> Any:
        yield f"{left},{right}"


def _sink() -> FileSink:
    return (
        FileSink.for_row_format(NOWHERE, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )


def _numbers(
    env: StreamExecutionEnvironment, n: int, rate: float | None, uid: str, timed: bool
) -> Any:
    """A source of 0..n-1; `timed`: one reader, with event time (monotonous)."""
    source = DataGeneratorSource(identity, count=n, records_per_second=rate)
    if not timed:
        return env.from_source(source, WatermarkStrategy.no_watermarks(), uid).uid(uid)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(event_time)
    return env.from_source(source, strategy, uid).uid(uid).set_parallelism(1)


def build(env: StreamExecutionEnvironment, n: int, rate: float | None) -> None:
    """Add the four pipelines (module docstring) to `env`."""
    values = _numbers(env, n, rate, "values", timed=False)
    keyed = values.key_by(lambda v: v % KEYS)
    keyed.process(RunningCount()).uid("count").sink_to(_sink()).uid("keyed-sink")

    windows = (
        _numbers(env, n, rate, "timed", timed=True)
        .map(lambda v: (v, 1))
        .uid("pairs")
        .key_by(lambda pair: pair[0] % WINDOW_KEYS)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
        .reduce(add_pairs, window_function=WindowSum())
        .uid("window")
    )
    windows.sink_to(_sink()).uid("window-sink")

    rules = env.from_source(
        DataGeneratorSource(rule, count=n, records_per_second=rate),
        WatermarkStrategy.no_watermarks(),
        "rules",
    )
    rules = rules.uid("rules").set_parallelism(1)
    applied = keyed.connect(rules.broadcast(RULE_STATE)).process(ApplyRules()).uid("apply")
    applied.sink_to(_sink()).uid("broadcast-sink")

    lefts = _numbers(env, n, rate, "lefts", timed=True).key_by(lambda v: v % JOIN_KEYS)
    rights = _numbers(env, n, rate, "rights", timed=True).key_by(lambda v: v % JOIN_KEYS)
    joined = (
        lefts.interval_join(rights)
        .between(Time.milliseconds(-JOIN_BOUND_MS), Time.milliseconds(JOIN_BOUND_MS))
        .process(Pair())
        .uid("join")
    )
    joined.sink_to(_sink()).uid("join-sink")


def reference(n: int) -> dict[str, Counter[str]]:
    """Each pipeline's committed lines for the input 0..n-1, computed without the engine."""
    per_key = Counter(v % KEYS for v in range(n))
    keyed = Counter(f"{k},{c}" for k, total in per_key.items() for c in range(1, total + 1))
    sums: dict[tuple[int, int], list[int]] = {}
    for v in range(n):
        start = v * STEP_MS // WINDOW_MS * WINDOW_MS
        entry = sums.setdefault((v % WINDOW_KEYS, start), [0, 0])
        entry[0] += v
        entry[1] += 1
    windows = Counter(f"{k},{start},{s},{c}" for (k, start), (s, c) in sums.items())
    broadcast = Counter(f"{v % KEYS},{v},{v * factor(v % RULES)}" for v in range(n))
    reach = JOIN_BOUND_MS // STEP_MS
    join = Counter(
        f"{left},{right}"
        for left in range(n)
        for right in range(max(left - reach, 0), min(left + reach, n - 1) + 1)
        if right % JOIN_KEYS == left % JOIN_KEYS
    )
    return dict(zip(PIPELINES, (keyed, windows, broadcast, join), strict=True))

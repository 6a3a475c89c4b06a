"""Window jobs for the end-to-end tests, and the reference computation of their output.

The source emits the ints 0..n-1 in order (one subtask, fixed rate); value v has key `v % K`
and the event-time timestamp `ts(v)`: blocks of `BLOCK` values, one ms apart, separated by a
gap of `GAP` ms (so session windows form one session per block and key). From it, one job runs
eight windowed pipelines into one exactly-once file sink, one line per fired window (or pair):

    T,key,start,end,sum           keyed tumbling event-time windows (reduce + process fn)
    S,key,start,end,sum,count     keyed sliding event-time windows (aggregate + process fn)
    E,key,start,end,sum,count     keyed session windows (process)
    C,key,first,last,sum,count    keyed count windows (count_window + apply)
    A,start,end,sum,count         window_all tumbling windows (process all)
    W,key,a b c                   keyed global windows, a count trigger firing every EVERY-th
                                  element, a count evictor keeping the last KEEP (process)
    J,a,b                         window join of the values v % 3 != 0 (a) and v % 3 == 0 (b)
                                  by v % JOIN_KEYS in tumbling event-time windows
    O,key,a a ...,b ...           the coGroup of the same two sides in the same windows

Failures are planned per attempt inside window functions, at the firing of a given window:
`{attempt: (how, line kind, window start)}`, how in ("raise", "kill").
"""

from __future__ import annotations

import collections
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.jobs import InjectedFailure
from tests.support.environments import file_sink, job_environment
from tidegate.common import WatermarkStrategy
from tidegate.common.time import Time
from tidegate.common.watermark_strategy import TimestampAssigner
from tidegate.datastream import (
    AggregateFunction,
    CoGroupFunction,
    JoinFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    WindowFunction,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.output_tag import OutputTag
from tidegate.datastream.window import (
    CountEvictor,
    CountTrigger,
    CountWindow,
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

K = 4
BLOCK, GAP = 500, 1_000
TUMBLE, SLIDE_SIZE, SLIDE, SESSION_GAP, ALL_SIZE, COUNT = 200, 300, 100, 100, 500, 5
EVERY, KEEP, JOIN_KEYS = 7, 3, 50


def ts(v: int) -> int:
    return v + (v // BLOCK) * GAP


@dataclass(frozen=True)
class FailurePlan:
    steps: dict[int, tuple[str, str, int]] = field(default_factory=dict)

    def fire(self, attempt: int, kind: str, start: int) -> None:
        step = self.steps.get(attempt)
        if step is None or step[1:] != (kind, start):
            return
        if step[0] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedFailure(f"planned failure in attempt {attempt} at {kind} window {start}")


class _Planned:
    def __init__(self, kind: str, plan: FailurePlan) -> None:
        self.kind = kind
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()


class KeyedLines(_Planned, ProcessWindowFunction):
    """T/S/E lines: sums (and counts) of the elements, or of a pre-aggregate."""

    def process(self, key, context, elements):
        w = context.window()
        self.plan.fire(self.attempt, self.kind, w.start)
        (first, *rest) = list(elements)
        if self.kind == "T":  # the reduced sum
            yield f"T,{key},{w.start},{w.end},{first}"
        elif self.kind == "S":  # the aggregated (sum, count)
            yield f"S,{key},{w.start},{w.end},{first[0]},{first[1]}"
        else:
            values = [first, *rest]
            yield f"E,{key},{w.start},{w.end},{sum(values)},{len(values)}"


class SumCount(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return (acc_a[0] + acc_b[0], acc_a[1] + acc_b[1])


class CountLines(WindowFunction):
    def apply(self, key, window, inputs):
        values = list(inputs)
        yield f"C,{key},{values[0]},{values[-1]},{sum(values)},{len(values)}"


class AllLines(_Planned, ProcessAllWindowFunction):
    def process(self, context, elements):
        w = context.window()
        self.plan.fire(self.attempt, "A", w.start)
        values = list(elements)
        yield f"A,{w.start},{w.end},{sum(values)},{len(values)}"


class RecentLines(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield f"W,{key},{' '.join(map(str, elements))}"


class JoinLines(JoinFunction):
    def join(self, first, second):
        return f"J,{first},{second}"


class CoGroupLines(CoGroupFunction):
    def co_group(self, first, second):
        key = (first or second)[0] % JOIN_KEYS
        yield f"O,{key},{' '.join(map(str, sorted(first)))},{' '.join(map(str, sorted(second)))}"


def _env(
    checkpoints: Path,
    interval_ms: int,
    runner: str = "spark",
    parallelism: int = 2,
    restore_path: str | None = None,
) -> StreamExecutionEnvironment:
    return job_environment(
        runner,
        checkpoints,
        parallelism=parallelism,
        interval_ms=interval_ms,
        restore_path=restore_path,
    )


def window_job(
    out: Path,
    checkpoints: Path,
    *,
    n: int,
    rate: float,
    plan: FailurePlan,
    interval_ms: int = 200,
    runner: str = "spark",
    parallelism: int = 2,
    restore_path: str | None = None,
) -> StreamExecutionEnvironment:
    """The five windowed pipelines (module docstring); the keyed ones at `parallelism`."""
    env = _env(checkpoints, interval_ms, runner, parallelism, restore_path)
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda v, _t: ts(v)
    )
    ds = env.from_source(source, None, "numbers").uid("numbers").set_parallelism(1)
    # at the source's parallelism (chained): each key's values reach its window in order
    ds = ds.assign_timestamps_and_watermarks(strategy).uid("timestamps").set_parallelism(1)
    keyed = ds.key_by(lambda v: v % K)
    tumbling = (
        keyed.window(TumblingEventTimeWindows.of(Time.milliseconds(TUMBLE)))
        .reduce(lambda a, b: a + b, window_function=KeyedLines("T", plan))
        .uid("tumbling")
    )
    sliding = (
        keyed.window(
            SlidingEventTimeWindows.of(Time.milliseconds(SLIDE_SIZE), Time.milliseconds(SLIDE))
        )
        .aggregate(SumCount(), window_function=KeyedLines("S", plan))
        .uid("sliding")
    )
    sessions = (
        keyed.window(EventTimeSessionWindows.with_gap(Time.milliseconds(SESSION_GAP)))
        .process(KeyedLines("E", plan))
        .uid("sessions")
    )
    counts = keyed.count_window(COUNT).apply(CountLines()).uid("counts")
    everything = (
        ds.window_all(TumblingEventTimeWindows.of(Time.milliseconds(ALL_SIZE)))
        .process(AllLines("A", plan))
        .uid("all")
    )
    recent = (
        keyed.window(GlobalWindows.create())
        .trigger(CountTrigger.of(EVERY))
        .evictor(CountEvictor.of(KEEP))
        .process(RecentLines())
        .uid("global")
    )
    left, right = ds.filter(lambda v: v % 3 != 0), ds.filter(lambda v: v % 3 == 0)
    window = TumblingEventTimeWindows.of(Time.milliseconds(TUMBLE))
    joined = (
        left.join(right)
        .where(lambda v: v % JOIN_KEYS)
        .equal_to(lambda v: v % JOIN_KEYS)
        .window(window)
        .apply(JoinLines())
        .uid("join")
    )
    grouped = (
        left.co_group(right)
        .where(lambda v: v % JOIN_KEYS)
        .equal_to(lambda v: v % JOIN_KEYS)
        .window(window)
        .apply(CoGroupLines())
        .uid("co-group")
    )
    tumbling.union(sliding, sessions, counts, everything, recent, joined, grouped).sink_to(
        file_sink(out)
    ).uid("sink")
    return env


def expected_lines(n: int) -> collections.Counter:
    """The reference: every window of every pipeline, computed from the values directly."""
    values = range(n)
    tumbling: dict = collections.defaultdict(int)
    sliding: dict = collections.defaultdict(lambda: [0, 0])
    sessions: dict = collections.defaultdict(list)
    everything: dict = collections.defaultdict(lambda: [0, 0])
    per_key: dict = collections.defaultdict(list)
    for v in values:
        k, t = v % K, ts(v)
        tumbling[(k, t - t % TUMBLE)] += v
        for start in range(t - t % SLIDE, t - SLIDE_SIZE, -SLIDE):
            sliding[(k, start)][0] += v
            sliding[(k, start)][1] += 1
        sessions[(k, v // BLOCK)].append(v)
        everything[t - t % ALL_SIZE][0] += v
        everything[t - t % ALL_SIZE][1] += 1
        per_key[k].append(v)
    lines = [f"T,{k},{s},{s + TUMBLE},{total}" for (k, s), total in tumbling.items()]
    lines += [f"S,{k},{s},{s + SLIDE_SIZE},{a},{c}" for (k, s), (a, c) in sliding.items()]
    for (k, _block), vs in sessions.items():
        lines.append(f"E,{k},{ts(vs[0])},{ts(vs[-1]) + SESSION_GAP},{sum(vs)},{len(vs)}")
    for k, vs in per_key.items():
        for i in range(0, len(vs) - COUNT + 1, COUNT):
            chunk = vs[i : i + COUNT]
            lines.append(f"C,{k},{chunk[0]},{chunk[-1]},{sum(chunk)},{COUNT}")
    lines += [f"A,{s},{s + ALL_SIZE},{a},{c}" for s, (a, c) in everything.items()]
    for k, vs in per_key.items():  # global windows: the last KEEP at every EVERY-th element
        lines += [
            f"W,{k},{' '.join(map(str, vs[i - KEEP : i]))}"
            for i in range(EVERY, len(vs) + 1, EVERY)
        ]
    sides: dict = collections.defaultdict(lambda: ([], []))
    for v in values:
        t = ts(v)
        sides[(t - t % TUMBLE, v % JOIN_KEYS)][v % 3 == 0].append(v)
    for (_start, key), (a, b) in sides.items():
        lines += [f"J,{x},{y}" for x in a for y in b]
        lines.append(f"O,{key},{' '.join(map(str, a))},{' '.join(map(str, b))}")
    return collections.Counter(lines)


def check_windows_exactly_once(lines: list[str], n: int) -> None:
    """Committed output == the reference, window for window: nothing lost, nothing twice."""
    got, expected = collections.Counter(lines), expected_lines(n)
    duplicated = sorted(line for line, c in got.items() if c > 1)
    lost = sorted((expected - got).elements())
    extra = sorted((got - expected).elements())
    assert (lost[:5], duplicated[:5], extra[:5]) == ([], [], []), (
        f"{len(lost)} lost, {len(duplicated)} duplicated, {len(extra)} unexpected"
    )
    windows_per_key = collections.Counter(tuple(line.split(",")[:2]) for line in lines)
    expected_per_key = collections.Counter(
        tuple(line.split(",")[:2]) for line in expected.elements()
    )
    assert windows_per_key == expected_per_key


# late data ------------------------------------------------------------------------------------
LATE = OutputTag("late")
LATE_EVERY, LATE_BY = 50, 3_000


def late_ts(v: int) -> int:
    """Every LATE_EVERY-th value (from LATE_BY on) is LATE_BY ms older than its neighbours:
    its window closed long before it arrives."""
    return v - LATE_BY if v % LATE_EVERY == LATE_EVERY - 1 and v >= LATE_BY else v


class TumblingLines(_Planned, ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        self.plan.fire(self.attempt, "T", w.start)
        (total,) = elements
        yield f"T,{key},{w.start},{w.end},{total}"


def late_data_job(
    out: Path, checkpoints: Path, *, n: int, rate: float, plan: FailurePlan
) -> StreamExecutionEnvironment:
    env = _env(checkpoints, 200)
    source = DataGeneratorSource(lambda i: i, count=n, records_per_second=rate)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda v, _t: late_ts(v)
    )
    ds = env.from_source(source, None, "numbers").uid("numbers").set_parallelism(1)
    # at the source's parallelism (chained): each key's values reach its window in order
    ds = ds.assign_timestamps_and_watermarks(strategy).uid("timestamps").set_parallelism(1)
    windows = (
        ds.key_by(lambda v: v % K)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(TUMBLE)))
        .side_output_late_data(LATE)
        .reduce(lambda a, b: a + b, window_function=TumblingLines("T", plan))
        .uid("tumbling")
    )
    late = windows.get_side_output(LATE).map(lambda v: f"L,{v}")
    # the same windows, allowed to be LATE_BY + TUMBLE ms late: each late value fires its
    # window again, with the value added
    refired = (
        ds.key_by(lambda v: v % K)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(TUMBLE)))
        .allowed_lateness(LATE_BY + TUMBLE)
        .reduce(lambda a, b: a + b, window_function=RefiredLines())
        .uid("lateness")
    )
    windows.union(late, refired).sink_to(file_sink(out)).uid("sink")
    return env


class RefiredLines(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        (total,) = elements
        yield f"R,{key},{w.start},{w.end},{total}"


def expected_late_lines(n: int) -> collections.Counter:
    """T: each window once, without its late values, which are L lines; R: each window once
    on time, then once more per late value, in the order they arrive, with it added."""
    tumbling: dict = collections.defaultdict(int)
    lines = []
    late = []
    for v in range(n):
        t = late_ts(v)
        if t != v:
            lines.append(f"L,{v}")
            late.append(v)
        else:
            tumbling[(v % K, t - t % TUMBLE)] += v
    lines += [f"T,{k},{s},{s + TUMBLE},{total}" for (k, s), total in tumbling.items()]
    lines += [f"R,{k},{s},{s + TUMBLE},{total}" for (k, s), total in tumbling.items()]
    refired = dict(tumbling)
    for v in late:
        t = late_ts(v)
        window = (v % K, t - t % TUMBLE)
        refired[window] += v
        lines.append(f"R,{window[0]},{window[1]},{window[1] + TUMBLE},{refired[window]}")
    return collections.Counter(lines)


# PyFlink's windowing examples' functions (examples/datastream/windowing) -------------------
class MyTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])


class CountWindowProcessFunction(ProcessWindowFunction[tuple, tuple, str, TimeWindow]):
    def process(
        self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable
    ) -> Iterable[tuple]:
        return [(key, context.window().start, context.window().end, len([e for e in elements]))]


class MySessionWindowTimeGapExtractor(SessionWindowTimeGapExtractor):
    def extract(self, element: tuple) -> int:
        return element[1]


class SumWindowFunction(WindowFunction[tuple, tuple, str, CountWindow]):
    def apply(self, key: str, window: CountWindow, inputs: Iterable[tuple]):
        return [(key, sum(i[0] for i in inputs))]


# window join / coGroup ------------------------------------------------------------------------
class PairUp(JoinFunction):
    def join(self, first, second):
        return f"J,{first[0]},{first[1]},{second[1]}"


class Sides(CoGroupFunction):
    def co_group(self, first, second):
        key = (first or second)[0][0]
        yield f"G,{key},{sorted(v for _, v in first)},{sorted(v for _, v in second)}"


def event_time(value, _record_timestamp) -> int:
    return value[1]


# processing-time windows ----------------------------------------------------------------------
class ProcessingTimeSums(ProcessWindowFunction):
    """`P,key,sum,count` per window; fails at its `fail_at`-th firing in attempts 0 (raise)
    and 1 (kill -9)."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at = fail_at

    def open(self, runtime_context) -> None:
        self.attempt = runtime_context.get_attempt_number()
        self.firings = 0

    def process(self, key, context, elements):
        self.firings += 1
        if self.firings == self.fail_at and self.attempt < 2:
            if self.attempt == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            raise InjectedFailure(f"planned failure at firing {self.firings}")
        (total, count) = elements[0]
        yield f"P,{key},{total},{count}"


def processing_time_job(
    out: Path, checkpoints: Path, *, real: int, padding: int, rate: float
) -> StreamExecutionEnvironment:
    """Values 0..real-1, then `padding` zeros (so every window with real values fires before
    the end of input: pending processing-time windows do not fire at the end, as in Flink),
    into tumbling processing-time windows (`P` lines, failing as ProcessingTimeSums says)
    and processing-time session windows (`Q` lines)."""
    env = _env(checkpoints, 200)
    source = DataGeneratorSource(
        lambda i: i if i < real else 0, count=real + padding, records_per_second=rate
    )
    ds = env.from_source(source, None, "numbers").uid("numbers").set_parallelism(1)
    windows = (
        ds.key_by(lambda v: v % K)
        .window(TumblingProcessingTimeWindows.of(Time.milliseconds(TUMBLE)))
        .aggregate(SumCount(), window_function=ProcessingTimeSums(fail_at=5))
        .uid("processing-time")
    )
    # processing-time sessions of the real values (the padding keeps the job running until
    # every session closed and fired): `Q,key,sum,count` per session
    sessions = (
        ds.filter(lambda v: v > 0)
        .key_by(lambda v: v % K)
        .window(ProcessingTimeSessionWindows.with_gap(Time.milliseconds(SESSION_GAP)))
        .aggregate(SumCount(), window_function=SessionSums())
        .uid("processing-time-sessions")
    )
    windows.union(sessions).sink_to(file_sink(out)).uid("sink")
    return env


class SessionSums(ProcessWindowFunction):
    def process(self, key, context, elements):
        (total, count) = elements[0]
        yield f"Q,{key},{total},{count}"

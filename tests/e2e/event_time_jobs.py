"""Event-time jobs for the end-to-end tests, and the reference computation of their output.

Record `i` (0 <= i < n) is `(key, i, ts)` with key `i % KEYS`. The source has two subtasks,
each reading half of the indices in order; `ts` is the index's position within its half times
STEP_MS, minus a jitter of up to JITTER_MS: both halves advance through the same event time,
out of order within the bound the job's WatermarkStrategy allows (BOUND_MS > JITTER_MS).

`WindowSums` (a KeyedProcessFunction) adds each record to its key's one-second event-time
window, kept in MapState, and sets an event-time timer at the window's end; on_timer emits
`key,end,sum,count,watermark,ordered` and clears the window: a hand-made tumbling window.
`ordered` says the subtask's timers fired in timestamp order within this attempt. Every tenth
record also goes to a side output, whose records pass a network edge and a ProcessFunction
that writes `i,ts,ctx.timestamp()` to a second FileSink.
"""

from __future__ import annotations

import collections
from pathlib import Path

from tests.e2e.timer_jobs import FailurePlan
from tests.support.environments import file_sink, job_environment
from tests.support.output import committed_lines
from tidegate.common import Duration, WatermarkStrategy
from tidegate.common.watermark_strategy import TimestampAssigner
from tidegate.datastream import (
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.state import MapStateDescriptor

KEYS = 7
STEP_MS = 20
JITTER_MS = 40
BOUND_MS = 50
WINDOW_MS = 1_000
MAX_WATERMARK = 2**63 - 1
SIDE = OutputTag("every-tenth")


def record(i: int, n: int) -> tuple[int, int, int]:
    position = i if i < n // 2 else i - n // 2
    jitter = ((i * 7919) % (JITTER_MS // 10 + 1)) * 10
    return i % KEYS, i, max(position * STEP_MS - jitter, 0)


class Generate:
    """The source's generator function (picklable, knows n)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, i: int) -> tuple[int, int, int]:
        return record(i, self.n)


class ThirdField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


def window_end(ts: int) -> int:
    return (ts // WINDOW_MS + 1) * WINDOW_MS - 1


class WindowSums(KeyedProcessFunction):
    def __init__(self, plan: FailurePlan) -> None:
        self.plan = plan

    def open(self, runtime_context) -> None:
        self.windows = runtime_context.get_map_state(MapStateDescriptor("windows"))
        self.attempt = runtime_context.get_attempt_number()
        self.last_fired = -(2**63)

    def process_element(self, value, ctx):
        _key, i, ts = value
        assert ctx.timestamp() == ts, (ctx.timestamp(), value)
        if ts <= ctx.timer_service().current_watermark():
            yield f"LATE,{i},{ts},{ctx.timer_service().current_watermark()}"
        end = window_end(ts)
        total, count = self.windows.get(end) or (0, 0)
        self.windows.put(end, (total + i, count + 1))
        ctx.timer_service().register_event_time_timer(end)
        if i % 10 == 0:
            ctx.output(SIDE, (i, ts))
        self.plan.fire(self.attempt, "record", i)

    def on_timer(self, timestamp, ctx):
        self.plan.fire(self.attempt, "timer", timestamp)
        total, count = self.windows.get(timestamp)
        self.windows.remove(timestamp)
        ordered = timestamp >= self.last_fired
        self.last_fired = timestamp
        wm = ctx.timer_service().current_watermark()
        yield f"{ctx.get_current_key()},{timestamp},{total},{count},{wm},{int(ordered)}"


class StampSide(ProcessFunction):
    def process_element(self, value, ctx):
        i, ts = value
        yield f"{i},{ts},{ctx.timestamp()}"


def window_job(
    out: Path,
    side_out: Path,
    checkpoints: Path,
    *,
    n: int,
    rate: float,
    plan: FailurePlan | None = None,
    restore_path: str | None = None,
    interval_ms: int = 200,
    unaligned: bool = False,
) -> StreamExecutionEnvironment:
    """datagen (2 subtasks, bounded out-of-orderness) -> key_by -> WindowSums (2) -> FileSink;
    its side output -> rebalance -> StampSide -> a second FileSink."""
    env = job_environment(
        "spark",
        checkpoints,
        interval_ms=interval_ms,
        restore_path=restore_path,
        watermark_interval_ms=100,
    )
    env.get_checkpoint_config().enable_unaligned_checkpoints(unaligned)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(BOUND_MS)
    ).with_timestamp_assigner(ThirdField())
    source = DataGeneratorSource(Generate(n), count=n, records_per_second=rate)
    ds = env.from_source(source, strategy, "records").uid("records")
    sums = ds.key_by(lambda r: r[0]).process(WindowSums(plan or FailurePlan())).uid("windows")
    sums.sink_to(file_sink(out)).uid("sink")
    side = sums.get_side_output(SIDE).rebalance().process(StampSide()).uid("stamp")
    side.sink_to(file_sink(side_out)).uid("side-sink")
    return env


def reference(n: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(key, window end) -> (sum of the indices, count)."""
    windows: dict[tuple[int, int], list[int]] = collections.defaultdict(lambda: [0, 0])
    for i in range(n):
        key, _, ts = record(i, n)
        w = windows[(key, window_end(ts))]
        w[0] += i
        w[1] += 1
    return {k: (s, c) for k, (s, c) in windows.items()}


def fired(out: Path | list[Path]) -> list[tuple[int, int, int, int, int, bool]]:
    """(key, end, sum, count, watermark, ordered) per committed line; LATE lines fail."""
    lines = committed_lines(*(out if isinstance(out, list) else [out]))
    late = [line for line in lines if line.startswith("LATE")]
    assert not late, f"records within the bound were late: {late[:5]}"
    result = []
    for line in lines:
        key, end, total, count, wm, ordered = map(int, line.split(","))
        result.append((key, end, total, count, wm, ordered == 1))
    return result


def check_windows_exactly_once(firings: list, n: int) -> None:
    """Every window of the reference fired exactly once with its exact sum and count, at or
    after its end on the event-time clock, and each subtask fired in timestamp order."""
    expected = reference(n)
    seen = collections.Counter((k, end) for k, end, *_ in firings)
    duplicated = sorted(w for w, c in seen.items() if c > 1)
    lost = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    assert (lost[:5], duplicated[:5], extra[:5]) == ([], [], []), (
        f"{len(lost)} lost, {len(duplicated)} duplicated, {len(extra)} unexpected windows"
    )
    for key, end, total, count, wm, ordered in firings:
        assert (total, count) == expected[(key, end)], (key, end, total, count)
        assert wm >= end and ordered, (key, end, wm, ordered)


def check_side_output(side_out: Path | list[Path], n: int) -> None:
    """Every tenth record exactly once, with its timestamp carried to the side output."""
    outs = side_out if isinstance(side_out, list) else [side_out]
    lines = [line for o in outs for line in committed_lines(o)]
    got = sorted(tuple(map(int, line.split(","))) for line in lines)
    want = sorted((i, record(i, n)[2], record(i, n)[2]) for i in range(0, n, 10))
    assert got == want


class Unbounded:
    """Index -> record of an endless source in event-time order (one subtask, no end)."""

    def __call__(self, i: int) -> tuple[int, int, int]:
        key, _, ts = record(i, 2**62)
        return key, i, ts


def idle_partition_job(out: Path, checkpoints: Path, rate: float) -> StreamExecutionEnvironment:
    """An endless source A (bounded out-of-orderness) unioned with a source B that emits one
    record, then nothing, and marks itself idle after 300 ms (`with_idleness`); both feed
    WindowSums. Without idleness B's watermark would hold every timer back forever."""
    env = job_environment("spark", checkpoints, restarts=None, watermark_interval_ms=100)
    busy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(BOUND_MS)
    ).with_timestamp_assigner(ThirdField())
    quiet = (
        WatermarkStrategy.for_monotonous_timestamps()
        .with_timestamp_assigner(ThirdField())
        .with_idleness(Duration.of_millis(300))
    )
    a = env.from_source(DataGeneratorSource(Unbounded(), None, rate), busy, "busy")
    b = env.from_source(DataGeneratorSource(lambda i: (KEYS, -1, 0), None, 1e-6), quiet, "quiet")
    a = a.uid("busy").set_parallelism(1)
    b = b.uid("quiet").set_parallelism(1)
    sums = a.union(b).key_by(lambda r: r[0]).process(WindowSums(FailurePlan())).uid("windows")
    sums.sink_to(file_sink(out)).uid("sink")
    return env

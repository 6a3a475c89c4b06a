"""Windows end to end on Spark: keyed tumbling, sliding, session and count windows, window_all,
global windows with a count trigger and a count evictor, a window join and a coGroup in one
exactly-once job, with an exception and two kill -9 injected while windows fire; late data to a
side output and allowed lateness (late firings), and processing-time tumbling and session
windows, each across an exception and a kill -9. Every window's result is compared with a
reference computation: each window exactly once, none lost, none extra."""

from __future__ import annotations

import collections

from tests.e2e.window_jobs import (
    CountWindowProcessFunction,
    FailurePlan,
    MySessionWindowTimeGapExtractor,
    MyTimestampAssigner,
    PairUp,
    Sides,
    SumWindowFunction,
    check_windows_exactly_once,
    event_time,
    expected_late_lines,
    late_data_job,
    processing_time_job,
    window_job,
)
from tests.support.environments import job_environment
from tests.support.output import committed_lines
from tests.support.snapshots import stop_with_savepoint
from tests.support.waiting import resolved
from tidegate.common import Encoder, Time, Types, WatermarkStrategy
from tidegate.datastream.connectors.file_system import FileSink
from tidegate.datastream.window import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)


def test_keyed_and_all_windows_are_exactly_once_across_an_exception_and_two_kills(spark, tmp_path):
    n = 6_000
    plan = FailurePlan(
        {
            0: ("raise", "T", 6_000),  # tumbling window [6000, 6200) fires: an exception
            1: ("kill", "S", 9_000),  # sliding window [9000, 9300) fires: kill -9
            2: ("kill", "E", 12_000),  # key 0's session of block 8 fires: kill -9
        }
    )
    env = window_job(tmp_path / "out", tmp_path / "chk", n=n, rate=2_000, plan=plan)
    client = env.execute_async("windows")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 3
    check_windows_exactly_once(committed_lines(tmp_path / "out"), n)


def test_late_elements_go_to_the_side_output_or_refire_their_window_exactly_once_across_failures(
    spark, tmp_path
):
    n = 5_000
    plan = FailurePlan({0: ("raise", "T", 3_000), 1: ("kill", "T", 4_000)})
    env = late_data_job(tmp_path / "out", tmp_path / "chk", n=n, rate=1_000, plan=plan)
    client = env.execute_async("late data")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 2
    got = collections.Counter(committed_lines(tmp_path / "out"))
    expected = expected_late_lines(n)
    assert sum(1 for line in got if line.startswith("L,")) == (n - 3_000) // 50
    assert got == expected


def test_processing_time_windows_and_sessions_count_every_value_once_across_an_exception_and_a_kill(
    spark, tmp_path
):
    real = 4_000
    env = processing_time_job(
        tmp_path / "out", tmp_path / "chk", real=real, padding=1_500, rate=2_000
    )
    client = env.execute_async("processing-time windows")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 2
    # which values share a window depends on the clock: the windows' sums by key (and the
    # sessions' counts: the last tumbling windows of padding zeros never fire) add up to the
    # reference, every value exactly once
    totals = collections.Counter()
    for kind, key, total, count in (line.split(",") for line in committed_lines(tmp_path / "out")):
        totals[kind, int(key)] += int(total)
        if kind == "Q":
            totals["Q count", int(key)] += int(count)
    expected = collections.Counter()
    for v in range(real):
        expected["P", v % 4] += v
        if v > 0:
            expected["Q", v % 4] += v
            expected["Q count", v % 4] += 1
    assert totals == expected


def test_rescaling_2_to_3_to_2_through_savepoints_moves_open_windows_with_their_keys(
    spark, tmp_path
):
    n = 8_000
    restore = None
    for run, parallelism in (("run1", 2), ("run2", 3)):
        env = window_job(
            tmp_path / run,
            tmp_path / "chk",
            n=n,
            rate=2_000,
            plan=FailurePlan(),
            parallelism=parallelism,
            restore_path=restore,
        )
        client = env.execute_async(f"windows at parallelism {parallelism}")
        restore = stop_with_savepoint(client, tmp_path / "savepoints", after_checkpoints=2)
    env = window_job(
        tmp_path / "run3",
        tmp_path / "chk",
        n=n,
        rate=2_000,
        plan=FailurePlan(),
        restore_path=restore,
    )
    resolved(
        env.execute_async("windows back at parallelism 2").get_job_execution_result(),
        "the job to finish",
    )
    runs = [committed_lines(tmp_path / run) for run in ("run1", "run2", "run3")]
    assert all(runs), "every run fired windows"
    check_windows_exactly_once([line for lines in runs for line in lines], n)


# PyFlink's windowing examples (apache-flink's examples/datastream/windowing), with tidegate's
# imports, on the local runner; the expected lines are what Flink prints for them.
def _run_example(tmp_path, data, build) -> list[str]:
    env = job_environment("local", parallelism=1, interval_ms=None, restarts=None)
    stream = env.from_collection(data, type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        MyTimestampAssigner()
    )
    ds = build(stream.assign_timestamps_and_watermarks(strategy))
    ds.sink_to(FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build())
    env.execute()
    return sorted(committed_lines(tmp_path))


def test_pyflinks_windowing_examples_print_flinks_results(tmp_path):
    process = CountWindowProcessFunction()
    hi = [("hi", t) for t in (1, 2, 3, 4, 5, 8, 9, 15)]
    tumbling = _run_example(
        tmp_path / "tumbling",
        hi,
        lambda s: (
            s.key_by(lambda x: x[0], key_type=Types.STRING())
            .window(TumblingEventTimeWindows.of(Time.milliseconds(5)))
            .process(process)
        ),
    )
    assert tumbling == ["('hi', 0, 5, 4)", "('hi', 15, 20, 1)", "('hi', 5, 10, 3)"]
    sliding = _run_example(
        tmp_path / "sliding",
        hi,
        lambda s: (
            s.key_by(lambda x: x[0])
            .window(SlidingEventTimeWindows.of(Time.milliseconds(5), Time.milliseconds(2)))
            .process(process)
        ),
    )
    assert sliding == sorted(
        f"('hi', {s}, {s + 5}, {n})"
        for s, n in [(-2, 2), (0, 4), (2, 4), (4, 3), (6, 2), (8, 2), (12, 1), (14, 1)]
    )
    sessions = [("hi", t) for t in (1, 2, 3, 4, 9, 9, 15)]
    gap = _run_example(
        tmp_path / "gap",
        sessions,
        lambda s: (
            s.key_by(lambda x: x[0])
            .window(EventTimeSessionWindows.with_gap(Time.milliseconds(5)))
            .process(process)
        ),
    )
    assert gap == ["('hi', 1, 14, 6)", "('hi', 15, 20, 1)"]
    dynamic = _run_example(
        tmp_path / "dynamic",
        sessions,
        lambda s: (
            s.key_by(lambda x: x[0])
            .window(EventTimeSessionWindows.with_dynamic_gap(MySessionWindowTimeGapExtractor()))
            .process(process)
        ),
    )
    assert dynamic == ["('hi', 1, 8, 4)", "('hi', 9, 30, 3)"]


def test_pyflinks_count_window_example_sums_every_three_elements_per_key(tmp_path):
    env = job_environment("local", parallelism=1, interval_ms=None, restarts=None)
    data = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]
    ds = (
        env.from_collection(data, type_info=Types.TUPLE([Types.INT(), Types.STRING()]))
        .key_by(lambda x: x[1], key_type=Types.STRING())
        .count_window(3)
        .apply(SumWindowFunction(), Types.TUPLE([Types.STRING(), Types.INT()]))
    )
    ds.sink_to(FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build())
    env.execute()
    # the simple string encoder writes Flink's toString of the declared Tuple type
    assert sorted(committed_lines(tmp_path)) == ["(hello,12)", "(hi,9)"]


def test_a_window_join_pairs_equal_keys_of_the_same_window_and_co_group_sees_both_sides(
    tmp_path,
):
    env = job_environment("local", parallelism=2, interval_ms=None, restarts=None)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(event_time)
    orders = env.from_collection([("a", 1), ("b", 2), ("a", 3), ("c", 12), ("a", 14)])
    payments = env.from_collection([("a", 4), ("a", 5), ("b", 11), ("c", 13), ("d", 15)])
    orders = orders.assign_timestamps_and_watermarks(strategy)
    payments = payments.assign_timestamps_and_watermarks(strategy)
    window = TumblingEventTimeWindows.of(Time.milliseconds(10))
    joined = (
        orders.join(payments)
        .where(lambda o: o[0])
        .equal_to(lambda p: p[0])
        .window(window)
        .apply(PairUp())
    )
    grouped = (
        orders.co_group(payments)
        .where(lambda o: o[0])
        .equal_to(lambda p: p[0])
        .window(window)
        .apply(Sides())
    )
    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build()
    joined.union(grouped).sink_to(sink)
    env.execute()
    assert sorted(committed_lines(tmp_path)) == sorted(
        [
            "J,a,1,4",  # [0, 10): a x a (2 x 2 pairs); b has no partner in this window
            "J,a,1,5",
            "J,a,3,4",
            "J,a,3,5",
            "J,c,12,13",  # [10, 20)
            "G,a,[1, 3],[4, 5]",
            "G,b,[2],[]",
            "G,b,[],[11]",
            "G,c,[12],[13]",
            "G,a,[14],[]",
            "G,d,[],[15]",
        ]
    )

"""Event time end to end on Spark: event-time timers of a KeyedProcessFunction fire as the
watermark advances, in timestamp order, with out-of-order input within the bound; the result
equals a reference computation window for window, exactly once across an exception and two
kill -9s and across a stop-with-savepoint and restore mid-stream; side outputs carry their
timestamps into a second FileSink; an idle source partition does not hold the timers back.
(tests/e2e/event_time_jobs.py has the jobs and the reference.)"""

from __future__ import annotations

from tests.e2e.event_time_jobs import (
    KEYS,
    MAX_WATERMARK,
    check_side_output,
    check_windows_exactly_once,
    fired,
    idle_partition_job,
    record,
    window_end,
    window_job,
)
from tests.e2e.timer_jobs import FailurePlan
from tests.support.output import committed_lines
from tests.support.snapshots import stop_with_savepoint
from tests.support.waiting import resolved, wait_until


def test_event_time_windows_fire_exactly_once_as_the_watermark_advances_across_failures(
    spark, tmp_path
):
    n = 8_000
    plan = FailurePlan(
        {
            0: ("raise", "record", 1_000),  # mid-stream, some windows fired
            1: ("kill", "timer", 35_999),  # kill -9 while the watermark fires a window
            2: ("kill", "record", 3_500),  # kill -9 between records
        }
    )
    env = window_job(
        tmp_path / "out", tmp_path / "side", tmp_path / "chk", n=n, rate=2_000, plan=plan
    )
    client = env.execute_async("event-time windows under failures")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 3
    firings = fired(tmp_path / "out")
    check_windows_exactly_once(firings, n)
    # most windows fired on watermark progress, not at the end of input
    progressed = [f for f in firings if f[4] < MAX_WATERMARK]
    assert len(progressed) > len(firings) // 2, (len(progressed), len(firings))
    check_side_output(tmp_path / "side", n)


def test_event_time_windows_are_exactly_once_with_unaligned_checkpoints_across_kills(
    spark, tmp_path
):
    n = 8_000
    plan = FailurePlan({0: ("kill", "record", 2_000), 1: ("kill", "timer", 45_999)})
    env = window_job(
        tmp_path / "out",
        tmp_path / "side",
        tmp_path / "chk",
        n=n,
        rate=2_000,
        plan=plan,
        unaligned=True,
    )
    client = env.execute_async("event-time windows, unaligned checkpoints")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 2
    check_windows_exactly_once(fired(tmp_path / "out"), n)
    check_side_output(tmp_path / "side", n)


def test_a_restore_from_a_savepoint_mid_stream_neither_re_emits_nor_loses_a_window(spark, tmp_path):
    n = 8_000
    first = window_job(tmp_path / "run1", tmp_path / "side1", tmp_path / "chk", n=n, rate=1_000)
    client = first.execute_async("until a savepoint")
    savepoint = stop_with_savepoint(client, tmp_path / "savepoints", after_checkpoints=3)
    second = window_job(
        tmp_path / "run2",
        tmp_path / "side2",
        tmp_path / "chk",
        n=n,
        rate=4_000,
        restore_path=savepoint,
    )
    resolved(second.execute_async("restored").get_job_execution_result(), "the job to finish")

    before, after = fired(tmp_path / "run1"), fired(tmp_path / "run2")
    assert before and after  # the savepoint was taken mid-stream
    assert all(f[4] < MAX_WATERMARK for f in before)
    check_windows_exactly_once(before + after, n)
    check_side_output([tmp_path / "side1", tmp_path / "side2"], n)


def test_an_idle_source_partition_does_not_hold_back_event_time_timers(spark, tmp_path):
    env = idle_partition_job(tmp_path / "out", tmp_path / "chk", rate=500)
    client = env.execute_async("one idle source")
    jm = client.jobmaster
    wait_until(
        lambda: (
            len(committed_lines(tmp_path / "out")) >= 20 or jm.stats.completed_checkpoints >= 60
        ),
        "20 windows or 60 checkpoints",
        job=client,
    )
    resolved(client.cancel(), "the job to be cancelled")
    firings = fired(tmp_path / "out")
    assert len(firings) >= 20, "the idle source held the watermark back"
    assert all(end <= wm < MAX_WATERMARK for _k, end, _s, _c, wm, _o in firings)
    assert (KEYS, window_end(0), -1, 1) in {f[:4] for f in firings}  # the idle one's record
    # every window of the busy source that fired is complete (its indices in event-time order)
    last = max(end for key, end, *_ in firings if key < KEYS)
    sums: dict = {}
    for i in range((last + 2 * 1_000) // 20):
        key, _, ts = record(i, 2**62)
        entry = sums.setdefault((key, window_end(ts)), [0, 0])
        entry[0] += i
        entry[1] += 1
    for key, end, total, count, _wm, ordered in firings:
        if key < KEYS:
            assert [total, count] == sums[(key, end)] and ordered

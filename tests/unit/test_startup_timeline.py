"""The start-up timeline of job attempts (tidegate/metrics/startup.py): steps recorded from
scripted marks, phases as differences, the slowest slot's marks, a restart from its failure."""

from __future__ import annotations

import time

from tidegate.metrics.startup import AttemptStartup, StartupTimeline, process_start_time
from tidegate.runtime.messages import SlotStartup


def test_phases_are_the_time_from_each_step_to_the_next_the_slowest_slot_counting():
    a = AttemptStartup(0, started=100.0, session_ready=104.0, stage_submitted=104.5, running=107.0)
    a.slots = {
        0: SlotStartup(task_started=105.0, job_loaded=105.5, tasks_created=107.25),
        1: SlotStartup(task_started=106.0, job_loaded=106.25, tasks_created=107.5),
    }
    assert a.marks() == {
        "started": 100.0,
        "session_ready": 104.0,
        "stage_submitted": 104.5,
        "task_started": 106.0,
        "job_loaded": 106.25,
        "running": 107.0,
        "tasks_created": 107.5,
    }
    assert a.phases() == {
        "session_ready": 4.0,
        "stage_submitted": 0.5,
        "task_started": 1.5,
        "job_loaded": 0.25,
        "running": 0.75,
        "tasks_created": 0.5,
    }


def test_a_missing_step_has_no_phase_and_the_next_counts_from_the_step_before():
    # the local runner has no Spark session; one slot has not reported its subtasks yet
    a = AttemptStartup(1, started=10.0, failed=9.0, stage_submitted=10.5, running=11.0)
    a.slots = {0: SlotStartup(10.75, 10.875, tasks_created=11.5), 1: SlotStartup(10.625, 10.75)}
    phases = a.phases()
    assert phases["restart"] == 1.0
    assert phases["session_ready"] is None
    assert phases["stage_submitted"] == 0.5
    assert phases["task_started"] == 0.25
    assert phases["tasks_created"] is None
    assert a.to_json()["slots"]["1"]["tasks-created"] is None


def test_the_timeline_keeps_each_attempt_and_times_a_restart_from_the_failure():
    timeline = StartupTimeline()
    timeline.attempt_started(0)
    timeline.mark(0, "stage_submitted")
    timeline.slot_registered(0, 0, SlotStartup(1.0, 2.0))
    timeline.slot_ready(0, 0, 3.0)
    timeline.slot_ready(0, 0, 4.0)  # later metrics repeat it: the first one stays
    timeline.attempt_failed()
    timeline.attempt_started(1)
    timeline.mark(0, "running")  # a late mark of the ended attempt is kept apart
    first, second = timeline.attempts()
    assert first.slots[0].tasks_created == 3.0
    assert first.failed is None and second.failed is not None
    assert second.failed <= second.started
    assert second.slots == {} and second.stage_submitted is None
    assert [a["attempt"] for a in timeline.to_json()] == [0, 1]


def test_the_process_start_time_is_before_now():
    started = process_start_time()  # Linux: from /proc
    assert started is not None
    assert 0 <= time.time() - started < 24 * 3600

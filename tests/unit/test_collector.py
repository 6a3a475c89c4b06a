"""The slots' garbage-collector settings (runtime/collector.py): applied while a slot's subtasks
run, undone after (a Spark worker may run other tasks), cyclic garbage still collected, and a
bad setting refused when the job is submitted."""

from __future__ import annotations

import gc

import pytest

from tidegate.common import Configuration
from tidegate.common.configuration import GC_THRESHOLD
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.runtime.collector import tuned_collector


def test_within_the_objects_that_existed_are_frozen_and_young_collections_are_rarer():
    before = gc.get_threshold()
    with tuned_collector(50_000):
        assert gc.get_threshold() == (50_000, *before[1:])
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_made_within_is_still_collected():
    collections = []

    def count(phase, info):
        if phase == "stop":
            collections.append(info["collected"])

    gc.callbacks.append(count)
    try:
        with tuned_collector(10_000):
            for _ in range(100_000):  # each a list that refers to itself: only gc frees it
                cycle: list = []
                cycle.append(cycle)
    finally:
        gc.callbacks.remove(count)
    assert sum(collections) >= 90_000  # collected in rounds of ~10,000, not left to grow


def test_zero_keeps_pythons_settings():
    before = gc.get_threshold()
    with tuned_collector(0):
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_setting_reaches_the_job_and_a_negative_one_is_refused():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).print()
    assert env._job_spec("job").gc_threshold == 50_000
    env.configure(Configuration().set_integer(GC_THRESHOLD, 0))
    assert env._job_spec("job").gc_threshold == 0
    env.configure(Configuration().set_integer(GC_THRESHOLD, -1))
    with pytest.raises(ValueError, match=r"tidegate\.python\.gc-threshold must be 0"):
        env._job_spec("job")

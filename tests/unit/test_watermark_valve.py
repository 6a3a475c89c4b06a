"""The input watermark of a subtask (StatusWatermarkValve), driven by scripted Watermark and
WatermarkStatus events per channel: the minimum over active channels, monotonic, idle
channels not holding it back, all-idle subtasks, and channels becoming active again."""

from __future__ import annotations

from tidegate.runtime.watermarks import (
    MIN_WATERMARK,
    StatusWatermarkValve,
    ValveOutput,
    restore_watermark,
    snapshot_watermark,
)
from tidegate.state.operator_state import OperatorStateBackend


def run(valve: StatusWatermarkValve, script: list[tuple]) -> list[ValveOutput]:
    """Feed `("wm", channel, ts)` / `("idle"|"active", channel)` steps; the outputs that say
    something."""
    outputs = []
    for step in script:
        if step[0] == "wm":
            out = valve.on_watermark(step[1], step[2])
        else:
            out = valve.on_status(step[1], step[0] == "idle")
        if out != ValveOutput():
            outputs.append(out)
    return outputs


def test_the_input_watermark_is_the_minimum_over_the_channels():
    valve = StatusWatermarkValve(3)
    outs = run(valve, [("wm", 0, 10), ("wm", 1, 5), ("wm", 2, 7), ("wm", 1, 20), ("wm", 2, 30)])
    assert outs == [ValveOutput(5), ValveOutput(7), ValveOutput(10)]
    assert valve.current == 10


def test_a_channel_going_back_does_not_move_the_watermark_back():
    valve = StatusWatermarkValve(2)
    outs = run(valve, [("wm", 0, 10), ("wm", 1, 10), ("wm", 0, 3), ("wm", 1, 4)])
    assert outs == [ValveOutput(10)]


def test_an_idle_channel_does_not_hold_the_watermark_back():
    valve = StatusWatermarkValve(2)
    outs = run(valve, [("wm", 0, 50), ("idle", 1), ("wm", 0, 60)])
    assert outs == [ValveOutput(50), ValveOutput(60)]


def test_when_every_channel_is_idle_the_subtask_is_idle_at_the_highest_watermark():
    valve = StatusWatermarkValve(2)
    outs = run(valve, [("wm", 0, 10), ("wm", 1, 40), ("idle", 0), ("idle", 1)])
    assert outs == [ValveOutput(10), ValveOutput(40), ValveOutput(None, True)]
    assert valve.is_idle


def test_a_channel_active_again_counts_from_its_next_watermark_and_never_moves_it_back():
    valve = StatusWatermarkValve(2)
    outs = run(
        valve,
        [("idle", 1), ("wm", 0, 100), ("wm", 1, 20), ("active", 1), ("wm", 0, 200), ("wm", 1, 150)],
    )
    # channel 1's 20 arrived while idle; once active it holds the minimum at 100 (never back)
    assert outs == [ValveOutput(100), ValveOutput(150)]


def test_the_subtask_becomes_active_again_with_its_first_active_channel():
    valve = StatusWatermarkValve(2)
    outs = run(valve, [("idle", 0), ("idle", 1), ("active", 1), ("wm", 1, 5)])
    assert outs == [ValveOutput(None, True), ValveOutput(None, False), ValveOutput(5)]


def test_a_repeated_status_changes_nothing():
    valve = StatusWatermarkValve(1)
    assert run(valve, [("active", 0), ("idle", 0), ("idle", 0)]) == [ValveOutput(None, True)]


def test_a_watermark_is_kept_in_operator_state_and_restored_per_subtask_or_as_the_minimum():
    snapshots = []
    for subtask, wm in ((0, 70), (1, 50)):
        backend = OperatorStateBackend()
        snapshot_watermark(backend, subtask, wm)
        snapshots.append(backend.snapshot())
    union = {"__watermark__": ("union", [e for s in snapshots for e in s["__watermark__"][1]])}
    assert restore_watermark(union, 0, 2) == 70  # same parallelism: its own
    assert restore_watermark(union, 1, 2) == 50
    assert restore_watermark(union, 2, 3) == 50  # rescaled: never ahead of any old subtask
    assert restore_watermark({}, 0, 2) == MIN_WATERMARK


def test_an_operator_without_a_watermark_adds_no_state():
    backend = OperatorStateBackend()
    snapshot_watermark(backend, 0, MIN_WATERMARK)
    assert backend.snapshot() == {}

"""Broadcast state end to end on Spark: the "dynamic rules" job (a rules stream broadcast to a
keyed event stream, tests/e2e/broadcast_jobs.py) commits exactly the reference output despite
injected exceptions, with aligned and unaligned checkpoints, and a savepoint restored at another
parallelism (2 -> 3, 3 -> 2) puts the whole broadcast state on every new subtask."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.broadcast_jobs import (
    NUM_RULES,
    check_rules_applied_exactly_once,
    parse_state_lines,
    rules_job,
    split_state_lines,
)
from tests.support.output import committed_lines
from tests.support.waiting import resolved, wait_until
from tidegate.checkpoint.storage import read_checkpoint_metadata
from tidegate.runtime.restore import RestoredChannelState


@pytest.mark.parametrize("unaligned", [False, True], ids=["aligned", "unaligned"])
def test_rules_broadcast_to_a_keyed_stream_apply_exactly_once_despite_exceptions(
    spark, tmp_path, unaligned
):
    n = 12_000
    # values of the first event split ([0, n/2)), increasing, so each attempt reaches its own
    fail_at = {0: 1_500, 1: 3_500}
    out = tmp_path / "out"
    env = rules_job(
        out, tmp_path / "chk", runner="spark", n=n, parallelism=2, rate=3_000, fail_at=fail_at
    )
    env.get_checkpoint_config().enable_unaligned_checkpoints(unaligned)
    env.get_checkpoint_config().set_num_retained_checkpoints(1_000)  # the restored ones stay
    client = env.execute_async("broadcast rules with exceptions")
    in_flight = in_flight_rules_while_running(client)
    resolved(client.get_job_execution_result(), "the job to finish")

    assert client.jobmaster.stats.restarts == len(fail_at)
    states, events = split_state_lines(committed_lines(out))
    check_rules_applied_exactly_once(events, n)
    history = client.jobmaster.stats.checkpoints.history()
    assert any(c.unaligned for c in history) == unaligned
    by_attempt: dict[int, dict[int, set[int]]] = {}
    for _p, subtask, attempt, rules in parse_state_lines(states):
        assert subtask not in by_attempt.setdefault(attempt, {}), "two reports of one subtask"
        by_attempt[attempt][subtask] = rules
    assert len(by_attempt[len(fail_at)]) == 2  # the last attempt's reports were committed
    # Every subtask of an attempt restored the same checkpoint, and reported its broadcast
    # state before its first record. Aligned, the copies are equal; unaligned, a copy lacks
    # the rules in flight to its subtask at the checkpoint, which it replays first: a copy
    # and its in-flight rules are equal.
    for attempt, reports in by_attempt.items():
        flying = in_flight.get(attempt, {})
        copies = {frozenset(r | flying.get(s, set())) for s, r in reports.items()}
        assert len(copies) == 1, (attempt, reports, flying)


def in_flight_rules_while_running(client) -> dict[int, dict[int, set[int]]]:
    """Until the job ended: by attempt, by subtask of the rules operator, the rules in the
    in-flight records of the checkpoint the attempt restored (its files go when the job
    finishes, so they are read as soon as the attempt restored it)."""
    jm, found = client.jobmaster, {}

    def read_new_restores() -> bool:
        ended = jm.done.is_set()
        for restore in jm.stats.checkpoints.restores():
            if restore.attempt not in found:
                assert not ended, (
                    f"the job ended before attempt {restore.attempt}'s restore was read"
                )
                found[restore.attempt] = in_flight_rules(restore.external_path)
        return ended

    wait_until(read_new_restores, "the job ended")
    return found


def in_flight_rules(checkpoint: str) -> dict[int, set[int]]:
    """The rules in the in-flight records a checkpoint holds for each subtask of the rules
    operator (rules are (rule, factor) tuples, events ints; none when it is aligned)."""
    entry = read_checkpoint_metadata(checkpoint).channel_state.get("rules")
    found: dict[int, set[int]] = {}
    for subtask, handle in (entry.subtasks if entry else {}).items():
        frames = RestoredChannelState(f"{checkpoint}/{handle.file}").read()
        found[subtask] = {r[0] for _c, records in frames for r in records if isinstance(r, tuple)}
    return found


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 2)], ids=["2to3", "3to2"])
def test_a_savepoint_restored_at_another_parallelism_puts_the_broadcast_state_on_every_subtask(
    spark, tmp_path, before, after
):
    n = 12_000
    chk = tmp_path / "chk"
    env = rules_job(tmp_path / "out1", chk, runner="spark", n=n, parallelism=before, rate=2_000)
    client = env.execute_async(f"rules at parallelism {before}")

    def every_rule_was_applied() -> bool:
        _states, events = split_state_lines(committed_lines(tmp_path / "out1"))
        return {int(line.split(",")[1]) % NUM_RULES for line in events} == set(range(NUM_RULES))

    # A committed event line shows that its rule was in broadcast state before a completed
    # checkpoint's barrier, so on every subtask (rules reach all subtasks before the barrier).
    wait_until(every_rule_was_applied, "every rule was applied", job=client)
    path = resolved(
        client.stop_with_savepoint(False, str(tmp_path / "savepoints")), "the stop with a savepoint"
    )
    resolved(client.get_job_execution_result(), "the job to finish")
    first_states, first = split_state_lines(committed_lines(tmp_path / "out1"))
    assert first  # every rule was applied before the savepoint

    config = {"execution.savepoint.path": path}
    env = rules_job(  # not stopped: at full speed
        tmp_path / "out2", chk, runner="spark", n=n, parallelism=after, rate=None, config=config
    )
    client = env.execute_async(f"rules restored at parallelism {after}")
    resolved(client.get_job_execution_result(), "the job to finish")

    second_states, second = split_state_lines(committed_lines(tmp_path / "out2"))
    check_rules_applied_exactly_once(first + second, n)
    reports = parse_state_lines(second_states)
    assert sorted((p, subtask) for p, subtask, _a, _r in reports) == [
        (after, i) for i in range(after)
    ]
    every_rule = set(range(NUM_RULES))
    assert all(rules == every_rule for _p, _s, _a, rules in reports), reports
    assert all(p == before for p, _s, _a, _r in parse_state_lines(first_states))


def test_a_job_restored_from_a_savepoint_reads_the_broadcast_state_from_the_operator_section(
    tmp_path: Path,
):
    """The savepoint's `_metadata` names the broadcast operator's state files, and each holds
    the broadcast state as operator state in the `broadcast` mode (local runner: no JVM)."""
    import json

    import fsspec

    from tidegate.state.snapshot_format import StateFileIndex, read_operator_state

    env = rules_job(tmp_path / "out", tmp_path / "chk", runner="local", n=4_000, parallelism=2,
                    rate=2_000)  # fmt: skip
    client = env.execute_async("rules")

    def every_rule_was_applied() -> bool:
        _states, events = split_state_lines(committed_lines(tmp_path / "out"))
        return {int(line.split(",")[1]) % NUM_RULES for line in events} == set(range(NUM_RULES))

    wait_until(every_rule_was_applied, "every rule was applied", job=client)
    path = resolved(
        client.stop_with_savepoint(False, str(tmp_path / "savepoints")), "the stop with a savepoint"
    )
    resolved(client.get_job_execution_result(), "the job to finish")
    metadata = json.loads((Path(path) / "_metadata").read_text())
    subtasks = metadata["operators"]["rules"]["subtasks"]
    assert sorted(subtasks) == ["0", "1"]
    for handle in subtasks.values():
        with fsspec.open(f"{path}/{handle['file']}", "rb") as f:
            state = read_operator_state(f, StateFileIndex.from_json(handle["index"]))
        mode, entries = state["rules"]
        assert mode == "broadcast"
        assert sorted(entries) == [(r, r + 2) for r in range(NUM_RULES)]

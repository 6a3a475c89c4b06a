"""The pure acknowledgement logic of a pending checkpoint."""

from __future__ import annotations

import pytest

from tidegate.checkpoint.options import CheckpointOptions, CheckpointType
from tidegate.checkpoint.pending import AbortReason, AckOutcome, PendingCheckpoint

TASKS = frozenset({("src", 0), ("src", 1)})


def pending() -> PendingCheckpoint:
    return PendingCheckpoint(7, 1_000, CheckpointOptions(), TASKS)


def test_it_is_fully_acknowledged_once_every_subtask_acked():
    p = pending()
    assert p.acknowledge(("src", 0), {"a": 1}) is AckOutcome.SUCCESS
    assert not p.is_fully_acknowledged
    assert p.not_yet_acknowledged == {("src", 1)}
    assert p.acknowledge(("src", 1), {"b": 2}) is AckOutcome.SUCCESS
    assert p.is_fully_acknowledged
    assert p.acked_states == {("src", 0): {"a": 1}, ("src", 1): {"b": 2}}


def test_a_second_ack_is_a_duplicate_and_keeps_the_first_state():
    p = pending()
    p.acknowledge(("src", 0), {"a": 1})
    assert p.acknowledge(("src", 0), {"a": 2}) is AckOutcome.DUPLICATE
    assert p.acked_states[("src", 0)] == {"a": 1}


def test_an_ack_from_a_subtask_not_expected_is_unknown():
    assert pending().acknowledge(("sink", 0), {}) is AckOutcome.UNKNOWN


def test_after_discard_every_ack_is_discarded_but_acked_states_stay_readable():
    p = pending()
    p.acknowledge(("src", 0), {"file": "x"})
    p.discard()
    assert p.is_discarded
    assert p.acknowledge(("src", 1), {}) is AckOutcome.DISCARDED
    assert p.acknowledge(("src", 0), {}) is AckOutcome.DISCARDED
    assert not p.is_fully_acknowledged
    assert p.acked_states == {("src", 0): {"file": "x"}}


def test_it_knows_whether_it_is_a_savepoint():
    assert not pending().is_savepoint
    options = CheckpointOptions(CheckpointType.SAVEPOINT)
    assert PendingCheckpoint(1, 0, options, TASKS).is_savepoint


def test_it_needs_at_least_one_subtask():
    with pytest.raises(ValueError):
        PendingCheckpoint(1, 0, CheckpointOptions(), frozenset())


def test_only_subsumed_and_stopped_aborts_are_not_failures():
    assert {r for r in AbortReason if not r.counts_as_failure} == {
        AbortReason.SUBSUMED,
        AbortReason.STOPPED,
    }

"""Placement of restarted slots on the hosts of their task-local state (deploy/placement.py):
scripted attempts and checkpoints in, preferred hosts and reports out."""

from __future__ import annotations

from tidegate.deploy.placement import LocalStateHosts, misplaced


def test_no_preference_before_a_checkpoint_completed_or_with_local_recovery_off():
    hosts = LocalStateHosts(enabled=True)
    assert hosts.preferred(2) is None
    hosts.attempt_running({0: "a", 1: "b"})
    assert hosts.preferred(2) is None  # running, but no local copy exists yet
    off = LocalStateHosts(enabled=False)
    off.attempt_running({0: "a", 1: "b"})
    off.checkpoint_completed()
    assert off.preferred(2) is None


def test_the_hosts_of_the_attempt_that_completed_the_latest_checkpoint_are_preferred():
    hosts = LocalStateHosts(enabled=True)
    hosts.attempt_running({1: "b", 0: "a"})
    hosts.checkpoint_completed()
    assert hosts.preferred(2) == ["a", "b"]
    # a restart lands elsewhere and fails before its first checkpoint: the copies are still
    # where the earlier attempt ran
    hosts.attempt_running({0: "c", 1: "b"})
    assert hosts.preferred(2) == ["a", "b"]
    hosts.checkpoint_completed()
    assert hosts.preferred(2) == ["c", "b"]


def test_another_slot_count_has_no_preference():
    """After rescaling, slot i holds other key groups than the copy on the old slot i's host."""
    hosts = LocalStateHosts(enabled=True)
    hosts.attempt_running({0: "a", 1: "b"})
    hosts.checkpoint_completed()
    assert hosts.preferred(3) is None


def test_each_slot_placed_elsewhere_is_reported_naming_both_hosts():
    assert misplaced(None, {0: "x"}) == []
    assert misplaced(["a", "b"], {0: "a", 1: "b"}) == []
    (message,) = misplaced(["a", "b", None], {0: "a", 1: "c", 2: "d"})
    assert message.startswith("slot 1 runs on c, not on b where its task-local state is")
    assert "checkpoint storage" in message and "spark.locality.wait" in message

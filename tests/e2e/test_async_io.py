"""Async I/O end to end, on both runners, against a real local asyncio lookup service
(bench/lookup_service.py: TCP on a free loopback port, 20-40 ms per request): ordered and
unordered results equal the reference (ordered keeps each subtask's input order, unordered
lets answers overtake); with event time, unordered results never cross a watermark and keep
their timestamps (event-time windows downstream see no late record and sum exactly); a kill -9
of a slot mid-stream, and an exception from async_invoke, still commit exactly the reference
(the in-flight inputs are in the checkpoint and re-issued); a failure names the operator."""

from __future__ import annotations

import pytest

from bench.lookup_service import LookupServer
from tests.e2e.async_jobs import (
    committed_files,
    event_time_lookup_job,
    lookup_job,
    reference,
)
from tests.e2e.event_time_jobs import check_windows_exactly_once, fired
from tests.e2e.jobs import check_restarts, kill_slots
from tests.support.output import committed_lines
from tests.support.waiting import resolved


@pytest.fixture(scope="module")
def service():
    """The lookup service: 20 ms per request, +5 ms per key % 5 (answers overtake)."""
    with LookupServer(latency_ms=20, spread_ms=5) as server:
        yield server


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_async_lookups_equal_the_reference(runner, tmp_path, service, ordered):
    n = 3_000
    env = lookup_job(
        tmp_path / "out", tmp_path / "chk", service, runner=runner, n=n, ordered=ordered
    )
    before = service.requests
    resolved(
        env.execute_async("async lookups").get_job_execution_result(),
        "the job to finish",
        timeout=300,
    )
    assert sorted(committed_lines(tmp_path / "out")) == reference(n)
    assert service.requests - before == n  # one request per record, no failure
    files = committed_files(tmp_path / "out")
    if ordered:  # a subtask's part files keep its source split's order
        assert all(values == sorted(values) for values in files)
    else:  # answers of 20..40 ms overtook each other
        assert any(values != sorted(values) for values in files)


def test_unordered_results_never_cross_a_watermark_and_keep_their_timestamps(
    runner, tmp_path, service
):
    n = 4_000
    env = event_time_lookup_job(
        tmp_path / "out", tmp_path / "chk", service, runner=runner, n=n, rate=4_000
    )
    resolved(
        env.execute_async("async event time").get_job_execution_result(),
        "the job to finish",
        timeout=300,
    )
    # fired() fails on LATE lines: a result emitted after a watermark covering its timestamp
    check_windows_exactly_once(fired(tmp_path / "out"), n)


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_kill_9_mid_stream_commits_the_reference_exactly_once(runner, tmp_path, service, ordered):
    n = 8_000
    env = lookup_job(
        tmp_path / "out",
        tmp_path / "chk",
        service,
        runner=runner,
        n=n,
        ordered=ordered,
        rate=1_500,
        capacity=50,
    )
    client = env.execute_async("async kill -9")
    killer = kill_slots(client, kills=1)
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(10)
    assert len(killer.killed) == 1, "the kill must have fired"
    check_restarts(client, kills=1)
    assert sorted(committed_lines(tmp_path / "out")) == reference(n)


def test_an_exception_in_async_invoke_restarts_the_job_which_commits_exactly_once(
    runner, tmp_path, service
):
    n = 5_000
    env = lookup_job(
        tmp_path / "out",
        tmp_path / "chk",
        service,
        runner=runner,
        n=n,
        ordered=False,
        rate=2_500,
        fail_at={0: 1_700},
    )
    client = env.execute_async("async failure")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    assert client.jobmaster.stats.restarts == 1
    assert sorted(committed_lines(tmp_path / "out")) == reference(n)
    [failure] = client.jobmaster.stats.timeline.failures()
    assert "Async I/O operator 'lookup'" in failure.message + failure.detail
    assert "async_invoke(1700) raised ConnectionResetError" in failure.message + failure.detail

"""Nexmark on Spark: every query's committed output equals the plain-Python reference over the
same generated events, record for record, in a job that fails twice (an exception and a
kill -9 of a worker) and restores from checkpoints — so the source replays exactly."""

from __future__ import annotations

from tests.e2e.nexmark_jobs import check_query, committed_rows, expected_rows, nexmark_job
from tests.support.waiting import resolved


def test_every_nexmark_query_equals_its_reference_across_an_exception_and_a_kill(spark, tmp_path):
    events = 30_000
    plan = {0: ("raise", 9_000), 1: ("kill", 21_000)}
    env = nexmark_job(tmp_path / "out", tmp_path / "chk", events=events, rate=6_000, plan=plan)
    client = env.execute_async("nexmark queries")
    resolved(client.get_job_execution_result(), "the job to finish")
    assert client.jobmaster.stats.restarts == 2
    expected = expected_rows(events)
    for name, rows in expected.items():
        check_query(name, committed_rows(tmp_path / "out" / name), rows)

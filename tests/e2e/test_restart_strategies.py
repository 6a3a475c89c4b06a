"""The failure-rate and exponential-delay restart strategies in running jobs on Spark: an
injected exception in each of the first two attempts and a kill -9 of a slot are each restarted
after the delay the strategy gives, from the latest checkpoint, and the committed output is the
reference, record for record; a failure rate above the limit fails the job instead."""

from __future__ import annotations

import pytest

from tests.e2e.jobs import check_restarts, count_job, kill_slots
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.waiting import resolved
from tidegate.common.job_client import JobExecutionException
from tidegate.common.restart_strategy import RestartStrategies

N = 12_000
FAIL_AT = {0: 2_000, 1: 5_000}


@pytest.mark.parametrize(
    ("strategy", "delays_s"),
    [
        # at most 5 failures in 60 s, 0.3 s before each restart
        (RestartStrategies.failure_rate_restart(5, 60_000, 300), [0.3, 0.3, 0.3]),
        # 0.2 s before the first restart, doubling
        (
            RestartStrategies.exponential_delay_restart(200, 10_000, 2.0, 3_600_000),
            [0.2, 0.4, 0.8],
        ),
    ],
    ids=["failure-rate", "exponential-delay"],
)
def test_a_restart_strategy_restarts_a_running_job_after_its_delays_exactly_once(
    spark, tmp_path, strategy, delays_s
):
    env = count_job(
        tmp_path / "out", tmp_path / "chk", runner="spark", n=N, rate=3_000, fail_at=FAIL_AT
    )
    env.set_restart_strategy(strategy)
    client = env.execute_async("restart strategy")
    killer = kill_slots(client, kills=1)
    resolved(client.get_job_execution_result(), "the job to finish")
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(client, kills=1, exceptions=(1, 2))
    check_exactly_once(committed_lines(tmp_path / "out"), N, 2)
    restarted = client.jobmaster.stats.startup.attempts()[1:]
    waited = [a.phases()["restart"] for a in restarted]
    assert len(waited) == client.jobmaster.stats.restarts
    assert all(w >= d for w, d in zip(waited, delays_s, strict=False)), (waited, delays_s)


def test_a_failure_rate_above_the_limit_fails_the_running_job(tmp_path):
    env = count_job(
        tmp_path / "out", tmp_path / "chk", runner="local", n=N, rate=3_000, fail_at=FAIL_AT
    )
    env.set_restart_strategy(RestartStrategies.failure_rate_restart(1, 60_000, 0))
    client = env.execute_async("too many failures")
    with pytest.raises(JobExecutionException, match="injected failure at record 5000"):
        resolved(client.get_job_execution_result(), "the job to fail")
    assert client.jobmaster.stats.restarts == 1  # the first failure was within the rate

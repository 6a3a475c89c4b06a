"""Restart strategies answer `restart_delay_s(failure_times, now)`: the delay before the next
restart in seconds, or None to give up. `failure_times` includes the failure just seen."""

from __future__ import annotations

import pytest

from tidegate.common.restart_strategy import (
    ExponentialDelayRestartStrategyConfiguration,
    FailureRateRestartStrategyConfiguration,
    FixedDelayRestartStrategyConfiguration,
    NoRestartStrategyConfiguration,
    RestartStrategies,
)


def failures(*times: float) -> list[float]:
    return list(times)


# no restart ---------------------------------------------------------------------------------
def test_no_restart_gives_up_on_the_first_failure():
    s = RestartStrategies.no_restart()
    assert isinstance(s, NoRestartStrategyConfiguration)
    assert s.restart_delay_s(failures(10.0), 10.0) is None
    assert "no restart" in s.describe()


# fixed delay --------------------------------------------------------------------------------
def test_fixed_delay_restarts_exactly_the_configured_number_of_times_with_its_delay():
    s = RestartStrategies.fixed_delay_restart(3, 250)
    assert isinstance(s, FixedDelayRestartStrategyConfiguration)
    times: list[float] = []
    answers = []
    for t in range(5):
        times.append(float(t))
        answers.append(s.restart_delay_s(list(times), float(t)))
    assert answers == [0.25, 0.25, 0.25, None, None]


def test_fixed_delay_with_zero_attempts_never_restarts():
    s = RestartStrategies.fixed_delay_restart(0, 1000)
    assert s.restart_delay_s(failures(1.0), 1.0) is None


def test_fixed_delay_does_not_forget_old_failures():
    s = RestartStrategies.fixed_delay_restart(1, 0)
    assert s.restart_delay_s(failures(0.0), 0.0) == 0
    # an hour later the budget is still spent: fixed delay counts every failure of the job
    assert s.restart_delay_s(failures(0.0, 3600.0), 3600.0) is None


def test_fixed_delay_describes_itself():
    assert "3 attempts" in RestartStrategies.fixed_delay_restart(3, 250).describe()


def test_fall_back_restart_is_practically_unlimited_with_a_one_second_delay():
    s = RestartStrategies.fall_back_restart()
    assert s.restart_delay_s([float(i) for i in range(1000)], 1000.0) == 1.0


# failure rate -------------------------------------------------------------------------------
def test_failure_rate_allows_up_to_the_rate_within_the_window():
    s = RestartStrategies.failure_rate_restart(2, 10_000, 500)
    assert isinstance(s, FailureRateRestartStrategyConfiguration)
    assert s.restart_delay_s(failures(0.0), 0.0) == 0.5
    assert s.restart_delay_s(failures(0.0, 1.0), 1.0) == 0.5
    assert s.restart_delay_s(failures(0.0, 1.0, 2.0), 2.0) is None


def test_failure_rate_forgets_failures_that_left_the_window():
    s = RestartStrategies.failure_rate_restart(2, 10_000, 500)
    # three failures in total, but only two within the last 10 s
    assert s.restart_delay_s(failures(0.0, 9.0, 10.5), 10.5) == 0.5
    # three within 10 s again
    assert s.restart_delay_s(failures(0.0, 9.0, 10.5, 12.0), 12.0) is None


def test_failure_rate_window_edge_counts_a_failure_exactly_at_its_start():
    s = RestartStrategies.failure_rate_restart(1, 1_000, 0)
    assert s.restart_delay_s(failures(5.0, 6.0), 6.0) is None
    assert s.restart_delay_s(failures(5.0, 6.001), 6.001) == 0


def test_failure_rate_describes_itself():
    text = RestartStrategies.failure_rate_restart(2, 10_000, 500).describe()
    assert "2" in text and "10000" in text


# exponential delay --------------------------------------------------------------------------
def test_exponential_delay_grows_by_the_multiplier_per_failure():
    s = RestartStrategies.exponential_delay_restart(
        initial_backoff=100, max_backoff=100_000, backoff_multiplier=3.0
    )
    assert isinstance(s, ExponentialDelayRestartStrategyConfiguration)
    times: list[float] = []
    delays = []
    for t in range(5):
        times.append(float(t))
        delays.append(s.restart_delay_s(list(times), float(t)))
    assert delays == pytest.approx([0.1, 0.3, 0.9, 2.7, 8.1])


def test_exponential_delay_is_capped_at_the_max_backoff():
    s = RestartStrategies.exponential_delay_restart(
        initial_backoff=1000, max_backoff=5000, backoff_multiplier=2.0
    )
    times = [float(t) for t in range(10)]
    delays = [s.restart_delay_s(times[: i + 1], times[i]) for i in range(10)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]


def test_exponential_delay_resets_after_a_quiet_period_longer_than_the_threshold():
    s = RestartStrategies.exponential_delay_restart(
        initial_backoff=100,
        max_backoff=10_000,
        backoff_multiplier=2.0,
        reset_backoff_threshold=60_000,
    )
    assert s.restart_delay_s(failures(0.0, 1.0, 2.0), 2.0) == pytest.approx(0.4)
    # 100 s of quiet since the last failure: back to the initial backoff
    assert s.restart_delay_s(failures(0.0, 1.0, 2.0, 102.0), 102.0) == pytest.approx(0.1)
    assert s.restart_delay_s(failures(0.0, 1.0, 2.0, 102.0, 103.0), 103.0) == pytest.approx(0.2)


def test_exponential_delay_never_gives_up_by_default():
    s = RestartStrategies.exponential_delay_restart()
    times = [float(t) for t in range(200)]
    assert s.restart_delay_s(times, times[-1]) == 60.0


def test_exponential_delay_defaults_are_flinks():
    s = RestartStrategies.exponential_delay_restart()
    assert (s.initial_backoff_ms, s.max_backoff_ms, s.backoff_multiplier) == (1000, 60_000, 2.0)
    assert s.reset_backoff_threshold_ms == 3_600_000
    assert s.restart_delay_s(failures(0.0), 0.0) == 1.0


def test_exponential_delay_gives_up_after_the_attempts_before_reset():
    s = ExponentialDelayRestartStrategyConfiguration(
        initial_backoff_ms=10, max_backoff_ms=1000, attempts_before_reset_backoff=2
    )
    assert s.restart_delay_s(failures(0.0), 0.0) == pytest.approx(0.01)
    assert s.restart_delay_s(failures(0.0, 1.0), 1.0) == pytest.approx(0.02)
    assert s.restart_delay_s(failures(0.0, 1.0, 2.0), 2.0) is None


def test_exponential_delay_describes_itself():
    assert "exponential" in RestartStrategies.exponential_delay_restart().describe()


# configurations are values -------------------------------------------------------------------
def test_strategy_configurations_are_immutable_values():
    a = RestartStrategies.fixed_delay_restart(3, 100)
    assert a == RestartStrategies.fixed_delay_restart(3, 100)
    assert hash(a) == hash(RestartStrategies.fixed_delay_restart(3, 100))
    with pytest.raises(AttributeError):
        a.restart_attempts = 5  # type: ignore[misc]


def test_the_environment_defaults_follow_flink():
    from tidegate.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    assert isinstance(env.get_restart_strategy(), NoRestartStrategyConfiguration)
    env.enable_checkpointing(1000)
    assert isinstance(env.get_restart_strategy(), ExponentialDelayRestartStrategyConfiguration)
    chosen = RestartStrategies.fixed_delay_restart(1, 1)
    env.set_restart_strategy(chosen)
    assert env.get_restart_strategy() is chosen


def test_exponential_delay_jitter_spreads_delays_within_the_factor():
    strategy = RestartStrategies.exponential_delay_restart(
        initial_backoff=1000, max_backoff=60_000, jitter_factor=0.1
    )
    delays = {strategy.restart_delay_s([0.0], 0.0) for _ in range(50)}
    assert all(0.9 <= d <= 1.1 for d in delays)
    assert len(delays) > 1

"""Restart strategies (PyFlink's `RestartStrategies`): what the JobMaster does after a failure.

Each configuration answers one question, `restart_delay_s(failure_times, now)`: restart after
this many seconds, or `None` to give up and fail the job with the last error.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class NoRestartStrategyConfiguration:
    def restart_delay_s(self, failure_times: list[float], now: float) -> float | None:
        return None

    def describe(self) -> str:
        return "no restart"


@dataclass(frozen=True)
class FixedDelayRestartStrategyConfiguration:
    restart_attempts: int
    delay_between_attempts_ms: int

    def restart_delay_s(self, failure_times: list[float], now: float) -> float | None:
        if len(failure_times) > self.restart_attempts:
            return None
        return self.delay_between_attempts_ms / 1000

    def describe(self) -> str:
        return f"fixed delay: {self.restart_attempts} attempts, {self.delay_between_attempts_ms} ms"


@dataclass(frozen=True)
class FailureRateRestartStrategyConfiguration:
    failure_rate: int
    failure_interval_ms: int
    delay_between_attempts_ms: int

    def restart_delay_s(self, failure_times: list[float], now: float) -> float | None:
        window_start = now - self.failure_interval_ms / 1000
        if sum(1 for t in failure_times if t >= window_start) > self.failure_rate:
            return None
        return self.delay_between_attempts_ms / 1000

    def describe(self) -> str:
        return (
            f"failure rate: at most {self.failure_rate} failures per "
            f"{self.failure_interval_ms} ms, {self.delay_between_attempts_ms} ms delay"
        )


@dataclass(frozen=True)
class ExponentialDelayRestartStrategyConfiguration:
    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 60_000
    backoff_multiplier: float = 2.0
    reset_backoff_threshold_ms: int = 3_600_000
    jitter_factor: float = 0.0
    attempts_before_reset_backoff: int = 2**31 - 1

    def restart_delay_s(self, failure_times: list[float], now: float) -> float | None:
        # Count failures since the last quiet period longer than the reset threshold.
        streak = 0
        previous = None
        for t in failure_times:
            if previous is not None and t - previous > self.reset_backoff_threshold_ms / 1000:
                streak = 0
            streak += 1
            previous = t
        if streak > self.attempts_before_reset_backoff:
            return None
        backoff = self.initial_backoff_ms * self.backoff_multiplier ** max(streak - 1, 0)
        backoff = min(backoff, self.max_backoff_ms)
        # jitter spreads the restarts of many jobs that failed together (Flink's jitter-factor)
        backoff *= 1 + random.uniform(-self.jitter_factor, self.jitter_factor)
        return backoff / 1000

    def describe(self) -> str:
        return f"exponential delay from {self.initial_backoff_ms} ms up to {self.max_backoff_ms} ms"


RestartStrategyConfiguration = (
    NoRestartStrategyConfiguration
    | FixedDelayRestartStrategyConfiguration
    | FailureRateRestartStrategyConfiguration
    | ExponentialDelayRestartStrategyConfiguration
)


class RestartStrategies:
    """PyFlink's factory names; delays and intervals are in milliseconds."""

    @staticmethod
    def no_restart() -> NoRestartStrategyConfiguration:
        return NoRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(
        restart_attempts: int, delay_between_attempts: int
    ) -> FixedDelayRestartStrategyConfiguration:
        return FixedDelayRestartStrategyConfiguration(restart_attempts, delay_between_attempts)

    @staticmethod
    def failure_rate_restart(
        failure_rate: int, failure_interval: int, delay_interval: int
    ) -> FailureRateRestartStrategyConfiguration:
        return FailureRateRestartStrategyConfiguration(
            failure_rate, failure_interval, delay_interval
        )

    @staticmethod
    def exponential_delay_restart(
        initial_backoff: int = 1000,
        max_backoff: int = 60_000,
        backoff_multiplier: float = 2.0,
        reset_backoff_threshold: int = 3_600_000,
        jitter_factor: float = 0.0,
    ) -> ExponentialDelayRestartStrategyConfiguration:
        return ExponentialDelayRestartStrategyConfiguration(
            initial_backoff, max_backoff, backoff_multiplier, reset_backoff_threshold, jitter_factor
        )

    @staticmethod
    def fall_back_restart() -> FixedDelayRestartStrategyConfiguration:
        """Flink's default when checkpointing is on: fixed delay, practically unlimited."""
        return FixedDelayRestartStrategyConfiguration(2**31 - 1, 1000)

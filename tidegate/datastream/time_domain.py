"""TimeDomain at PyFlink's import path (`pyflink.datastream.time_domain`); defined in
`tidegate.runtime.internal_timers`, where the timer service uses it."""

from tidegate.runtime.internal_timers import TimeDomain

__all__ = ["TimeDomain"]

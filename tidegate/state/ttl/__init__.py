"""Keyed state time-to-live (`StateTtlConfig`); see `factory` for how backends take part."""

from tidegate.state.ttl.config import StateTtlConfig
from tidegate.state.ttl.value import TtlValue, set_time_provider

__all__ = ["StateTtlConfig", "TtlValue", "set_time_provider"]

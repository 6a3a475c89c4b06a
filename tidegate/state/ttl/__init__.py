"""Keyed state time-to-live (`StateTtlConfig`); see `factory` for how backends take part."""

from tidegate.state.ttl.value import TtlValue, set_time_provider
from tidegate.state.ttl_config import StateTtlConfig

__all__ = ["StateTtlConfig", "TtlValue", "set_time_provider"]

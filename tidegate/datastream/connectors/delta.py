"""The Delta Lake sink at the path PyFlink would give it (PyFlink has no Delta connector:
tidegate's own, on delta-rs)."""

from tidegate.connectors.delta import DeltaSink, DeltaTableError

__all__ = ["DeltaSink", "DeltaTableError"]

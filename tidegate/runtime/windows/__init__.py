"""Windowing: windows, assigners, triggers, evictors, the merging window set and the window
operator (Flink's `org.apache.flink.streaming.api.windowing` and `WindowOperator`).

The user API re-exports these from `tidegate.datastream.window` (PyFlink's path)."""

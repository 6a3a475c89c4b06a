"""PyFlink's `pyflink.datastream.connectors.number_seq`."""

from tidegate.connectors.number_seq import NumberSequenceSource

__all__ = ["NumberSequenceSource"]

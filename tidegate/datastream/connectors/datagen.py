"""The data generator source, at the import path PyFlink would give it."""

from tidegate.connectors.datagen import DataGeneratorSource

__all__ = ["DataGeneratorSource"]

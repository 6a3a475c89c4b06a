"""PyFlink's `pyflink.datastream.connectors`."""

from tidegate.connectors.base import Sink, Source
from tidegate.connectors.datagen import DataGeneratorSource
from tidegate.connectors.delivery import DeliveryGuarantee
from tidegate.connectors.file_sink import FileSink
from tidegate.connectors.file_source import FileSource
from tidegate.connectors.number_seq import NumberSequenceSource

__all__ = [
    "DataGeneratorSource",
    "DeliveryGuarantee",
    "FileSink",
    "FileSource",
    "NumberSequenceSource",
    "Sink",
    "Source",
]

"""PyFlink's `pyflink.datastream.connectors.file_system`."""

from tidegate.connectors.file_sink import BucketAssigner, FileSink, OutputFileConfig, RollingPolicy
from tidegate.connectors.file_source import BulkFormat, FileSource, StreamFormat

__all__ = [
    "BucketAssigner",
    "BulkFormat",
    "FileSink",
    "FileSource",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
]

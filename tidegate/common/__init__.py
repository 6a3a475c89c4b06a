"""PyFlink-shaped helpers: Types, Row, Configuration, WatermarkStrategy, Duration, restart
strategies."""

from tidegate.common.configuration import Configuration
from tidegate.common.execution_config import ExecutionConfig
from tidegate.common.job_client import JobClient, JobExecutionException, JobExecutionResult
from tidegate.common.job_status import JobStatus
from tidegate.common.restart_strategy import RestartStrategies
from tidegate.common.serialization import (
    ByteArraySchema,
    DeserializationSchema,
    Encoder,
    SerializationSchema,
    SimpleStringSchema,
)
from tidegate.common.time import Duration, Time
from tidegate.common.typeinfo import TypeInformation, Types
from tidegate.common.types import Row, RowKind
from tidegate.common.watermark_strategy import (
    TimestampAssigner,
    Watermark,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarkStrategy,
)

__all__ = [
    "ByteArraySchema",
    "Configuration",
    "DeserializationSchema",
    "Duration",
    "Encoder",
    "ExecutionConfig",
    "JobClient",
    "JobExecutionException",
    "JobExecutionResult",
    "JobStatus",
    "RestartStrategies",
    "Row",
    "RowKind",
    "SerializationSchema",
    "SimpleStringSchema",
    "Time",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "Watermark",
    "WatermarkGenerator",
    "WatermarkOutput",
    "WatermarkStrategy",
]

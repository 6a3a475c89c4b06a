"""tidegate: stateful stream processing with Flink's checkpoint fault tolerance, on Apache Spark."""

__version__ = "0.1.0"

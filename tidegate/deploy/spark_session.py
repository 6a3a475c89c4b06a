"""The SparkSession a job runs on: the active one, or an embedded `local[N]` session."""

from __future__ import annotations

import os
import sys
from typing import Any

from tidegate.deploy.java import JavaUnavailableError, use_java


class SparkUnavailableError(RuntimeError):
    pass


def get_spark(master: str | None, num_slots: int) -> Any:
    """Reuse the active SparkSession, or start `local[N]` (N = max(slots, cores))."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # getActiveSession() is per thread; the JobMaster runs on its own thread, so look for a
    # running SparkContext instead (the user's session, or one spark-submit started).
    running = SparkContext._active_spark_context
    spark = SparkSession(running) if running is not None else None
    if spark is None:
        try:
            use_java()
        except JavaUnavailableError as e:
            raise SparkUnavailableError(str(e)) from None
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = SparkSession.builder
        # under spark-submit the master comes from its --master; else the embedded default
        if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
            master = f"local[{max(num_slots, os.cpu_count() or 1, 4)}]"
        if master is not None:
            builder = builder.master(master)
        spark = (
            builder.appName("tidegate")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.python.worker.reuse", "true")
            .config("spark.stage.maxConsecutiveAttempts", "1")
            .config("spark.sql.shuffle.partitions", "4")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
    elif master is not None and spark.sparkContext.master != master:
        raise SparkUnavailableError(
            f"a SparkSession on {spark.sparkContext.master!r} is already active in this process; "
            f"cannot switch to {master!r}. Stop it first or leave spark.master unset."
        )
    cores = spark.sparkContext.defaultParallelism
    if cores < num_slots:
        raise SparkUnavailableError(
            f"the job needs {num_slots} slots (its highest parallelism), but Spark offers "
            f"{cores} task slots ({spark.sparkContext.master}); barrier mode starts every slot at "
            "once. Lower the parallelism or give Spark more cores (e.g. local[N])."
        )
    return spark

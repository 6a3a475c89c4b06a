"""A job for the multi-host tests (tests/e2e/test_cluster.py), run as its own driver process:
numbers 0..N-1 (5,000/s) -> key_by(v % NUM_KEYS) -> running count -> exactly-once FileSink,
p = 2, on the Spark master given; nothing about tidegate's networking is configured (that is
what is tested), beyond extra `key=value` configuration entries.

    python cluster_job.py MASTER_URL DRIVER_HOST OUT CHECKPOINTS|- N [KEY=VALUE ...]

(`spark.*` keys go to the SparkSession; spark.cores.max is 2 unless given.) Log records go to
stderr stamped with their Unix time, from the level in $CLUSTER_JOB_LOG_LEVEL (WARNING):
bench/cluster_recovery.py times the job's recoveries from them. `launch` starts it so.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from tests.support.references import NUM_KEYS
from tidegate.common import Configuration, Encoder, RestartStrategies
from tidegate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink
from tidegate.datastream.state import ValueStateDescriptor


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield f"{value % NUM_KEYS},{value},{c}"


REPO = Path(__file__).resolve().parents[2]


def launch(
    master_url: str,
    driver_host: str,
    out: str,
    checkpoints: str,
    n: int,
    *entries: str,
    log_level: str = "WARNING",
) -> subprocess.Popen:
    """Start this job as a driver process of its own (a process group with its JVM, to kill
    as one), stdout and stderr piped."""
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=str(REPO),
        CLUSTER_JOB_LOG_LEVEL=log_level,
    )
    command = [sys.executable, __file__, master_url, driver_host, out, checkpoints, str(n)]
    return subprocess.Popen(
        [*command, *entries],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("CLUSTER_JOB_LOG_LEVEL", "WARNING"),
        format="%(created).3f %(levelname)s %(name)s: %(message)s",
    )
    master, driver_host, out, checkpoints, n = sys.argv[1:6]
    entries = dict(entry.split("=", 1) for entry in sys.argv[6:])
    spark_conf = {"spark.cores.max": "2"} | {
        k: v for k, v in entries.items() if k.startswith("spark.")
    }
    extra = {k: v for k, v in entries.items() if not k.startswith("spark.")}
    # Spark's own RPC needs a driver address the executors reach (the host name resolves to
    # loopback here, as on many machines); tidegate takes its own from Spark's
    builder = SparkSession.builder.master(master).appName("tidegate cluster test")
    builder = builder.config("spark.driver.host", driver_host).config("spark.ui.enabled", "false")
    builder = builder.config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
    # the JVMs start faster compiling with C1 only, as docs/spark.md advises (records never
    # pass through them); a session tidegate creates itself sets the same
    for jvm in ("driver", "executor"):
        builder = builder.config(f"spark.{jvm}.extraJavaOptions", "-XX:TieredStopAtLevel=1")
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    builder.getOrCreate()
    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", "spark").add_all(extra)
    )
    if "parallelism.default" not in extra:
        env.set_parallelism(2)
    env.enable_checkpointing(300)
    if checkpoints != "-":  # "-": none set
        env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoints)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(5, 0))
    source = DataGeneratorSource(lambda i: i, count=int(n), records_per_second=5_000)
    sink = (
        FileSink.for_row_format(out, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )
    numbers = env.from_source(source, None, "numbers").uid("numbers")
    counts = numbers.key_by(lambda v: v % NUM_KEYS).process(RunningCount()).uid("count")
    counts.sink_to(sink).uid("sink")
    env.execute("cluster")


if __name__ == "__main__":
    main()

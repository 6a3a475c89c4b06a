"""Parquet in, Parquet out, exactly once on Spark: a FileSource reads Parquet files (restored
mid-file, at a row group and row), a keyed running count goes through a kill -9 of a slot and
an exception, and a bulk-format FileSink writes Parquet part files rolled at each checkpoint;
Spark reads the committed directory with `spark.read.parquet`, and its rows equal the
reference, record for record."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tests.e2e.connector_jobs import parquet_count_job
from tests.e2e.jobs import kill_slots
from tests.support.output import committed_files
from tests.support.references import check_exactly_once
from tests.support.waiting import resolved
from tidegate.connectors.number_seq import split_range


def test_parquet_through_a_kill_9_and_an_exception_is_read_by_spark_exactly_once(spark, tmp_path):
    n, parallelism = 6_000, 2
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    for i, (low, high) in enumerate(split_range(0, n - 1, parallelism)):  # one file per reader
        values = list(range(low, high + 1))
        table = pa.table({"label": [f"v{v}" for v in values], "value": values})
        pq.write_table(table, inputs / f"{i}.parquet", row_group_size=300)
    # ~1,000 rows/s per reader, so restores land mid-file; the kill -9 comes in attempt 0,
    # then an exception in attempt 1 at a late value of the first file
    env = parquet_count_job(
        inputs,
        out,
        tmp_path / "chk",
        parallelism=parallelism,
        seconds_per_record=0.001,
        fail_at={1: 2_400},
    )
    client = env.execute_async("parquet exactly once")
    killer = kill_slots(client, kills=1)
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1, "the kill must have fired"
    assert client.jobmaster.stats.restarts == 2

    assert len(committed_files(out)) > 2 * parallelism  # rolled at every checkpoint
    frame = spark.read.parquet(str(out))
    assert [(f.name, f.dataType.simpleString()) for f in frame.schema.fields] == [
        ("key", "int"),
        ("value", "bigint"),
        ("count", "bigint"),
    ]
    lines = [f"{r.key},{r.value},{r['count']}" for r in frame.collect()]
    check_exactly_once(lines, n, parallelism)

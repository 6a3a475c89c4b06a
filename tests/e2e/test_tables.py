"""The Delta Lake and Iceberg sinks end to end on Spark: one job writes its running counts into
a partitioned Delta table and an Iceberg table (SQL catalog on sqlite) through an exception
and a kill -9 of a worker; both tables then hold exactly the reference, read by delta-rs, by
Spark's Parquet reader over the files the Delta log lists, and by pyiceberg; and no data file
of a failed attempt is left beside them. Both restored at 3 subtasks from a checkpoint taken
at 2 commit every checkpoint's rows once."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

from tests.e2e.connector_jobs import COUNTED_ROW, counted_row, rescaled_sinks_run, sink_count_job
from tests.e2e.jobs import check_restarts, kill_slots
from tests.support.references import check_consistent_prefix, check_exactly_once, same_records
from tests.support.waiting import resolved
from tidegate.datastream.connectors.delta import DeltaSink
from tidegate.datastream.connectors.iceberg import IcebergSink


def _lines(rows) -> list[str]:
    return [f"{r['key']},{r['value']},{r['count']}" for r in rows]


def _parquet_files(directory: Path) -> set[str]:
    return {str(p) for p in directory.rglob("*.parquet")}


def _sinks(tmp_path: Path) -> tuple[DeltaSink, IcebergSink]:
    delta = DeltaSink.builder().set_table_path(str(tmp_path / "delta"))
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"file://{tmp_path}/warehouse",
    }
    iceberg = IcebergSink.builder().set_catalog("test", catalog).set_table("db.counts")
    return delta.set_partition_columns("key").build(), iceberg.build()


def _delta_lines(delta: DeltaSink) -> list[str]:
    return _lines(DeltaTable(delta.table_path).to_pyarrow_table().to_pylist())


def _iceberg_lines(iceberg: IcebergSink) -> list[str]:
    table = iceberg.for_input_type(COUNTED_ROW).load_table()
    return _lines(table.scan().to_arrow().to_pylist())


def test_the_delta_and_iceberg_sinks_hold_exactly_the_reference_through_an_exception_and_a_kill_9(
    spark, tmp_path
):
    n = 20_000
    delta, iceberg = _sinks(tmp_path)
    delta_path = tmp_path / "delta"
    env = sink_count_job(
        [delta, iceberg],
        tmp_path / "chk",
        n=n,
        rate=8_000,
        fail_at={0: 3_000, 1: 3_000},
        interval_ms=500,  # a commit per sink subtask and checkpoint: fewer, larger files
        as_record=(counted_row, COUNTED_ROW),
    )
    job = env.execute_async("table sinks")
    killer = kill_slots(job, kills=1)
    resolved(job.get_job_execution_result(), "the job to finish", timeout=300)
    killer.join(5)
    assert len(killer.killed) == 1
    check_restarts(job, kills=1, exceptions=(1, 2))

    table = DeltaTable(str(delta_path))
    lines = _delta_lines(delta)
    check_exactly_once(lines, n, 2)
    files = table.file_uris()
    read = spark.read.option("basePath", str(delta_path)).parquet(*files)
    same_records(_lines(row.asDict() for row in read.collect()), lines)
    assert _parquet_files(delta_path) == set(files)  # the failed attempts' files were removed

    check_exactly_once(_iceberg_lines(iceberg), n, 2)
    counts = iceberg.for_input_type(COUNTED_ROW).load_table()
    referenced = {
        task.file.file_path.removeprefix("file://") for task in counts.scan().plan_files()
    }
    assert _parquet_files(tmp_path / "warehouse" / "db" / "counts" / "data") == referenced


def test_the_table_sinks_restored_at_3_subtasks_from_2_commit_every_checkpoint_once(
    spark, tmp_path
):
    """The committables of the checkpoint restored from keep the application ids of the run
    and writer that prepared them: committed again by the subtasks that take them over, they
    are recognised and skipped."""
    n = 12_000
    delta, iceberg = _sinks(tmp_path)

    def written() -> int:
        check_consistent_prefix(_delta_lines(delta))
        return len(_delta_lines(delta))

    rescaled_sinks_run(
        lambda: [delta, iceberg],
        tmp_path / "chk",
        n=n,
        written=written,
        as_record=(counted_row, COUNTED_ROW),
    )
    check_exactly_once(_delta_lines(delta), n, 2)  # the source's splits stay those planned at 2
    check_exactly_once(_iceberg_lines(iceberg), n, 2)

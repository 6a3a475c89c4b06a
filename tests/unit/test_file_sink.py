"""The exactly-once FileSink's two-phase commit protocol, step by step; also the print sink and
the PyFlink-shaped serialization helpers that sinks use."""

from __future__ import annotations

import glob
import os
import pickle
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tidegate.common.serialization import Encoder, SimpleStringSchema
from tidegate.connectors.base import Sink
from tidegate.connectors.file_sink import (
    BucketAssigner,
    CommitAction,
    FileSink,
    FileSinkCommittable,
    FileSinkWriter,
    OutputFileConfig,
    RollingPolicy,
    commit_action,
)
from tidegate.connectors.print_sink import PrintSink
from tidegate.datastream.connectors import file_system

# --- helpers -------------------------------------------------------------------------------


def make_sink(base: Path | str, rolling: RollingPolicy | None = None, **kw: Any) -> FileSink:
    return (
        FileSink.for_row_format(str(base), Encoder.simple_string_encoder())
        .with_output_file_config(
            OutputFileConfig.builder().with_part_prefix("part").with_part_suffix(".txt").build()
        )
        .with_bucket_assigner(kw.get("assigner", BucketAssigner.base_path_bucket_assigner()))
        .with_rolling_policy(rolling or RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )


def visible_files(base: Path) -> list[str]:
    """What a reader of the output sees: non-hidden files, as a plain glob finds them."""
    paths = glob.glob(f"{base}/**/*", recursive=True)
    return sorted(os.path.relpath(p, base) for p in paths if os.path.isfile(p))


def visible_lines(base: Path) -> list[str]:
    return [
        line
        for name in visible_files(base)
        for line in (base / name).read_text(encoding="utf-8").splitlines()
    ]


def hidden_files(base: Path) -> list[str]:
    return sorted(p.name for p in base.rglob(".*") if p.is_file())


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- the protocol, step by step ------------------------------------------------------------


def test_prepared_files_stay_hidden_until_commit_makes_them_visible(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(["a", "b"])
    writer.write_batch(["c"])
    assert visible_files(tmp_path) == []

    committables = writer.prepare_commit(1)
    assert committables == [
        FileSinkCommittable(
            str(tmp_path / ".part-0-0-0.txt.inprogress"), str(tmp_path / "part-0-0-0.txt")
        )
    ]
    assert visible_files(tmp_path) == []
    assert (tmp_path / ".part-0-0-0.txt.inprogress").read_text() == "a\nb\nc\n"

    sink.create_committer().commit(committables)
    assert visible_files(tmp_path) == ["part-0-0-0.txt"]
    assert visible_lines(tmp_path) == ["a", "b", "c"]
    assert hidden_files(tmp_path) == []


def test_committing_again_is_a_no_op(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(["a"])
    committables = writer.prepare_commit(1)
    committer = sink.create_committer()
    committer.commit(committables)
    committer.commit(committables)
    assert visible_lines(tmp_path) == ["a"]


def test_committing_a_committable_whose_files_are_both_gone_reports_data_loss(
    tmp_path: Path,
) -> None:
    sink = make_sink(tmp_path)
    lost = FileSinkCommittable(str(tmp_path / ".part-0-0-7.txt.inprogress"), str(tmp_path / "x"))
    with pytest.raises(FileNotFoundError, match="lost"):
        sink.create_committer().commit([lost])


def test_commit_action_decides_from_which_files_exist() -> None:
    assert commit_action(in_progress_exists=True, final_exists=False) is CommitAction.RENAME
    assert commit_action(in_progress_exists=True, final_exists=True) is CommitAction.RENAME
    assert commit_action(False, True) is CommitAction.ALREADY_COMMITTED
    assert commit_action(False, False) is CommitAction.LOST


def test_a_checkpoint_without_new_records_has_no_committables(tmp_path: Path) -> None:
    writer = make_sink(tmp_path).create_writer(0, 1, 0)
    assert writer.prepare_commit(1) == []
    writer.write_batch([])
    assert writer.prepare_commit(2) == []


def test_each_checkpoint_starts_a_new_part_file(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    writer = sink.create_writer(0, 1, 0)
    committer = sink.create_committer()
    for checkpoint_id, batch in enumerate([["a"], ["b", "c"], ["d"]], start=1):
        writer.write_batch(batch)
        committer.commit(writer.prepare_commit(checkpoint_id))
    assert visible_files(tmp_path) == ["part-0-0-0.txt", "part-0-0-1.txt", "part-0-0-2.txt"]
    assert visible_lines(tmp_path) == ["a", "b", "c", "d"]


def test_subtasks_write_files_named_by_subtask_and_attempt(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    for subtask in range(3):
        writer = sink.create_writer(subtask, 3, 2)
        writer.write_batch([f"s{subtask}"])
        sink.create_committer().commit(writer.prepare_commit(1))
    assert visible_files(tmp_path) == ["part-0-2-0.txt", "part-1-2-0.txt", "part-2-2-0.txt"]


def test_close_leaves_unprepared_data_hidden_in_progress(tmp_path: Path) -> None:
    writer = make_sink(tmp_path).create_writer(0, 1, 0)
    writer.write_batch(["a"])
    writer.close()
    assert visible_files(tmp_path) == []
    assert hidden_files(tmp_path) == [".part-0-0-0.txt.inprogress"]


def test_a_new_run_does_not_overwrite_final_files_of_an_earlier_run(tmp_path: Path) -> None:
    (tmp_path / "part-0-0-0.txt").write_text("old\n")
    sink = make_sink(tmp_path)
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(["new"])
    sink.create_committer().commit(writer.prepare_commit(1))
    assert visible_files(tmp_path) == ["part-0-0-0.txt", "part-0-0-1.txt"]
    assert visible_lines(tmp_path) == ["old", "new"]


# --- recovery ------------------------------------------------------------------------------------


def test_recover_deletes_only_this_subtasks_stale_files_and_keeps_restored_ones(
    tmp_path: Path,
) -> None:
    sink = make_sink(tmp_path)
    # Attempt 0, subtask 0: checkpoint 1 is pre-committed (and completes); later records are
    # pre-committed for checkpoint 2, which never completes; then more records; then a crash.
    w0 = sink.create_writer(0, 2, 0)
    w0.write_batch(["a"])
    restored = w0.prepare_commit(1)
    w0.write_batch(["after-1"])
    w0.prepare_commit(2)
    w0.write_batch(["after-2"])
    # Attempt 0, subtask 1 leaves an in-progress file too; attempt 1 of subtask 0 already has one.
    w1 = sink.create_writer(1, 2, 0)
    w1.write_batch(["other subtask"])
    current = sink.create_writer(0, 2, 1)
    current.write_batch(["current attempt"])
    for w in (w0, w1, current):
        w.close()

    sink.recover(0, 2, 1, restored)

    assert hidden_files(tmp_path) == [
        ".part-0-0-0.txt.inprogress",  # restored: kept
        ".part-0-1-0.txt.inprogress",  # this attempt: not stale
        ".part-1-0-0.txt.inprogress",  # another subtask's: not ours to delete
    ]
    sink.create_committer().commit(restored)
    assert visible_lines(tmp_path) == ["a"]


def test_recover_on_a_first_run_or_a_missing_base_path_does_nothing(tmp_path: Path) -> None:
    make_sink(tmp_path / "not-yet").recover(0, 1, 0, [])
    assert not (tmp_path / "not-yet").exists()


def test_recover_looks_into_every_bucket(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = make_sink(tmp_path, assigner=BucketAssigner.date_time_bucket_assigner(timezone_id="UTC"))
    writer = FileSinkWriter(sink, 0, 0, clock=clock)
    writer.write_batch(["hour 1"])
    clock.now += 3600
    writer.write_batch(["hour 2"])
    writer.close()
    assert len(hidden_files(tmp_path)) == 2
    sink.recover(0, 1, 1, [])
    assert hidden_files(tmp_path) == []


def test_a_crash_between_prepare_and_commit_then_recovery_yields_every_record_once(
    tmp_path: Path,
) -> None:
    records = [f"r{i}" for i in range(30)]
    sink = make_sink(tmp_path)
    # Attempt 0: checkpoint 1 after r0..r9 completes and commits; checkpoint 2 after r10..r19
    # completes but the crash comes before its commit; r20..r24 were written after it.
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(records[:10])
    sink.create_committer().commit(writer.prepare_commit(1))
    writer.write_batch(records[10:20])
    checkpoint_2 = writer.prepare_commit(2)
    writer.write_batch(records[20:25])
    del writer  # crash: nothing closed or committed

    # Attempt 1 restores checkpoint 2: recover, commit its committables, replay from r20.
    sink.recover(0, 1, 1, checkpoint_2)
    sink.create_committer().commit(checkpoint_2)
    writer = sink.create_writer(0, 1, 1)
    writer.write_batch(records[20:])
    sink.create_committer().commit(writer.prepare_commit(3))

    assert visible_lines(tmp_path) == records
    assert hidden_files(tmp_path) == []


# --- rolling -------------------------------------------------------------------------------------


def test_rolling_by_part_size_closes_files_that_the_next_checkpoint_commits(
    tmp_path: Path,
) -> None:
    sink = make_sink(tmp_path, RollingPolicy.default_rolling_policy(part_size=10))
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch(["abcd", "efgh", "ijkl", "mnop", "qrst"])  # 5 bytes each
    assert hidden_files(tmp_path) == [
        ".part-0-0-0.txt.inprogress",
        ".part-0-0-1.txt.inprogress",
        ".part-0-0-2.txt.inprogress",
    ]
    assert visible_files(tmp_path) == []

    committables = writer.prepare_commit(1)
    assert [Path(c.final_path).name for c in committables] == [
        "part-0-0-0.txt",
        "part-0-0-1.txt",
        "part-0-0-2.txt",
    ]
    sink.create_committer().commit(committables)
    assert [(tmp_path / f).stat().st_size for f in visible_files(tmp_path)] == [10, 10, 5]
    assert visible_lines(tmp_path) == ["abcd", "efgh", "ijkl", "mnop", "qrst"]


def test_rolling_by_age_and_inactivity_uses_processing_time(tmp_path: Path) -> None:
    policy = RollingPolicy.default_rolling_policy(
        rollover_interval=10_000, inactivity_interval=3_000
    )
    clock = FakeClock()
    writer = FileSinkWriter(make_sink(tmp_path, policy), 0, 0, clock=clock)
    writer.write_batch(["a"])
    clock.now += 2
    writer.write_batch(["b"])  # idle 2 s: same file
    clock.now += 3
    writer.write_batch(["c"])  # idle 3 s: rolled
    for _ in range(5):
        clock.now += 2
        writer.write_batch(["d"])  # never idle long, but 10 s old: rolled once
    names = [Path(c.final_path).name for c in writer.prepare_commit(1)]
    assert names == ["part-0-0-0.txt", "part-0-0-1.txt", "part-0-0-2.txt"]


def test_rolling_policy_rejects_non_positive_limits() -> None:
    with pytest.raises(ValueError, match="> 0"):
        RollingPolicy.default_rolling_policy(part_size=0)


# --- buckets -----------------------------------------------------------------------------------


def test_the_default_bucket_assigner_buckets_by_processing_hour(tmp_path: Path) -> None:
    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build()
    clock = FakeClock()
    writer = FileSinkWriter(sink, 0, 0, clock=clock)
    writer.write_batch(["x"])
    sink.create_committer().commit(writer.prepare_commit(1))
    from datetime import datetime

    hour = datetime.fromtimestamp(clock.now).strftime("%Y-%m-%d--%H")
    assert visible_files(tmp_path) == [f"{hour}/part-0-0-0"]


def test_date_time_buckets_follow_the_format_and_timezone(tmp_path: Path) -> None:
    assigner = BucketAssigner.date_time_bucket_assigner("%Y/%m/%d", "Asia/Tokyo")
    clock = FakeClock(1_704_067_200.0 - 3600)  # 2023-12-31 23:00 UTC = 2024-01-01 08:00 JST
    sink = make_sink(tmp_path, assigner=assigner)
    writer = FileSinkWriter(sink, 0, 0, clock=clock)
    writer.write_batch(["x"])
    sink.create_committer().commit(writer.prepare_commit(1))
    assert visible_files(tmp_path) == ["2024/01/01/part-0-0-0.txt"]


def test_date_time_bucket_assigner_rejects_java_style_patterns() -> None:
    with pytest.raises(ValueError, match="strftime"):
        BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH")


def test_custom_bucket_assigners_route_records_to_their_buckets(tmp_path: Path) -> None:
    class ByParity(BucketAssigner):
        def get_bucket_id(self, element: Any, now_ms: int) -> str:
            return f"parity={element % 2}"

    sink = make_sink(tmp_path, assigner=ByParity())
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch([1, 2, 3, 4])
    sink.create_committer().commit(writer.prepare_commit(1))
    assert visible_files(tmp_path) == ["parity=0/part-0-0-1.txt", "parity=1/part-0-0-0.txt"]
    assert (tmp_path / "parity=1" / "part-0-0-0.txt").read_text() == "1\n3\n"


def test_bucket_ids_cannot_escape_the_base_path(tmp_path: Path) -> None:
    class Escaping(BucketAssigner):
        def get_bucket_id(self, element: Any, now_ms: int) -> str:
            return "../outside"

    writer = make_sink(tmp_path / "base", assigner=Escaping()).create_writer(0, 1, 0)
    with pytest.raises(ValueError, match="relative"):
        writer.write_batch(["x"])


# --- configuration, other filesystems, imports ------------------------------------------------


def test_the_sink_satisfies_the_sink_contract_and_pickles(tmp_path: Path) -> None:
    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build()
    assert isinstance(sink, Sink)
    clone = pickle.loads(pickle.dumps(sink))
    assert clone.base_path == sink.base_path
    assert clone.encoder.encode("x") == b"x\n"


def test_output_file_config_defaults_to_flinks_part_prefix_and_no_suffix() -> None:
    assert OutputFileConfig.builder().build() == OutputFileConfig("part", "")
    with pytest.raises(ValueError, match="prefix"):
        OutputFileConfig("a/b", "")


def test_the_sink_works_on_other_fsspec_filesystems() -> None:
    fs = fsspec.filesystem("memory")
    try:
        sink = make_sink("memory://tidegate-sink-test")
        writer = sink.create_writer(0, 1, 0)
        writer.write_batch(["m1", "m2"])
        committables = writer.prepare_commit(1)
        assert fs.find("/tidegate-sink-test") == ["/tidegate-sink-test/.part-0-0-0.txt.inprogress"]
        sink.create_committer().commit(committables)
        sink.create_committer().commit(committables)
        assert fs.cat("/tidegate-sink-test/part-0-0-0.txt") == b"m1\nm2\n"
        assert fs.find("/tidegate-sink-test") == ["/tidegate-sink-test/part-0-0-0.txt"]
    finally:
        if fs.exists("/tidegate-sink-test"):
            fs.rm("/tidegate-sink-test", recursive=True)


def test_file_sink_classes_are_importable_from_the_pyflink_path() -> None:
    assert file_system.FileSink is FileSink
    assert file_system.OutputFileConfig is OutputFileConfig
    assert file_system.RollingPolicy is RollingPolicy
    assert file_system.BucketAssigner is BucketAssigner


# --- serialization helpers ---------------------------------------------------------------------


def test_simple_string_encoder_writes_str_and_a_newline_in_its_charset() -> None:
    assert Encoder.simple_string_encoder().encode(("a", 1)) == b"('a', 1)\n"
    assert Encoder.simple_string_encoder("latin-1").encode("é") == b"\xe9\n"
    assert Encoder.simple_string_encoder(charset="utf-8").encode("é") == "é\n".encode()


def test_simple_string_schema_round_trips_strings() -> None:
    schema = SimpleStringSchema()
    assert schema.serialize("héllo") == "héllo".encode()
    assert schema.deserialize(schema.encode("✓")) == "✓"
    with pytest.raises(ValueError, match="charset"):
        SimpleStringSchema("no-such-charset")


# --- print sink --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("identifier", "subtask", "parallelism", "expected"),
    [
        (None, 0, 1, "x\n"),
        (None, 1, 3, "2> x\n"),
        ("out", 0, 1, "out> x\n"),
        ("out", 2, 3, "out:3> x\n"),
    ],
)
def test_print_sink_prefixes_lines_like_flinks_print(
    identifier: str | None,
    subtask: int,
    parallelism: int,
    expected: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    writer = PrintSink(identifier).create_writer(subtask, parallelism, 0)
    writer.write_batch(["x"])
    assert capsys.readouterr().out == expected


def test_print_sink_prints_at_write_and_has_nothing_to_commit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sink = PrintSink(to_stderr=True)
    sink.recover(0, 1, 0, [])
    writer = sink.create_writer(0, 1, 0)
    writer.write_batch([1, 2])
    assert capsys.readouterr().err == "1\n2\n"
    assert writer.prepare_commit(1) == []
    sink.create_committer().commit([])


def test_a_typed_stream_is_written_as_flinks_simple_string_encoder_writes_it(tmp_path: Path):
    """sink_to hands the stream's declared type to the sink: Java's toString of the type
    (a Tuple `(a,1.5)`, a Row `+I[a, 1]`, a DOUBLE `1.0E10`); undeclared: str(record)."""
    from tidegate.common import Row, Types
    from tidegate.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    sink = make_sink(tmp_path)
    cases = [
        (Types.TUPLE([Types.STRING(), Types.DOUBLE()]), ("a", 1.5), "(a,1.5)"),
        (Types.ROW_NAMED(["n", "k"], [Types.STRING(), Types.INT()]), Row("a", 1), "+I[a, 1]"),
        (Types.DOUBLE(), 1e10, "1.0E10"),
        (None, ("a", 1), "('a', 1)"),
    ]
    for type_info, record, line in cases:
        ds = env.from_collection([record], type_info=type_info)
        typed = ds.sink_to(sink)._stream._transformation.connector
        assert typed.encoder.encode(record) == f"{line}\n".encode()
        assert typed.encoder.encode_batch([record, record]) == f"{line}\n{line}\n".encode()
    assert sink.encoder.encode(("a", 1)) == b"('a', 1)\n"  # the sink given is not changed

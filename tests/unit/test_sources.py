"""Sources: split planning, reading, and exact replay from snapshotted splits."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tidegate.connectors.base import Boundedness, Source
from tidegate.connectors.collection import CollectionSource, CollectionSplit
from tidegate.connectors.datagen import (
    DataGeneratorReader,
    DataGeneratorSource,
    DataGeneratorSplit,
    RateLimiter,
)
from tidegate.connectors.file_source import FileSource, FileSourceSplit, StreamFormat
from tidegate.connectors.number_seq import NumberSequenceSource, NumberSequenceSplit
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors import file_system

# --- helpers -------------------------------------------------------------------------------


def read_n(reader: Any, n: int, batch: int = 3) -> list[Any]:
    """Read exactly `n` records (fewer only if the reader finishes)."""
    out: list[Any] = []
    while len(out) < n:
        got = reader.poll_batch(min(batch, n - len(out)))
        if got is None:
            break
        out.extend(got)
    return out


def read_all(reader: Any, batch: int = 4) -> list[Any]:
    out: list[Any] = []
    while (got := reader.poll_batch(batch)) is not None:
        out.extend(got)
    return out


def round_robin(splits: list[Any], parallelism: int) -> list[list[Any]]:
    return [splits[i::parallelism] for i in range(parallelism)]


def through_pickle(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value))


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- every bounded source replays exactly ----------------------------------------------------

SourceCase = Callable[[Path], tuple[Source, list[Any]]]


def number_seq_case(tmp_path: Path) -> tuple[Source, list[Any]]:
    return NumberSequenceSource(5, 27), list(range(5, 28))


def datagen_case(tmp_path: Path) -> tuple[Source, list[Any]]:
    return DataGeneratorSource(lambda i: f"r{i}", count=23), [f"r{i}" for i in range(23)]


def collection_case(tmp_path: Path) -> tuple[Source, list[Any]]:
    elements = [f"e{i}" for i in range(17)]
    return CollectionSource(elements), elements


def file_case(tmp_path: Path) -> tuple[Source, list[Any]]:
    write(tmp_path / "in" / "a.txt", "a1\r\na2\nä3\n".encode())
    write(tmp_path / "in" / "b" / "c.txt", b"c1\nc2\nc3\nc4")
    write(tmp_path / "in" / "b" / "empty.txt", b"")
    write(tmp_path / "in" / "d.txt", "d1 ✓\n\nd3\n".encode())
    source = FileSource.for_record_stream_format(
        StreamFormat.text_line_format(), str(tmp_path / "in")
    ).build()
    return source, ["a1", "a2", "ä3", "c1", "c2", "c3", "c4", "d1 ✓", "", "d3"]


CASES = [number_seq_case, datagen_case, collection_case, file_case]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("k", [0, 1, 4, 9, 100])
def test_a_restored_reader_continues_exactly_after_the_snapshot(
    case: SourceCase, k: int, tmp_path: Path
) -> None:
    source, expected = case(tmp_path)
    first = source.create_reader(source.create_splits(1), 0, 1)
    head = read_n(first, k)
    snapshot = through_pickle(first.snapshot_splits())
    first.close()
    rest = read_all(source.create_reader(snapshot, 0, 1))
    assert head + rest == expected


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("k", [0, 2, 5, 100])
@pytest.mark.parametrize(("parallelism", "new_parallelism"), [(3, 3), (3, 2), (2, 4)])
def test_parallel_readers_restored_at_any_parallelism_lose_and_duplicate_nothing(
    case: SourceCase, k: int, parallelism: int, new_parallelism: int, tmp_path: Path
) -> None:
    source, expected = case(tmp_path)
    assignment = round_robin(source.create_splits(parallelism), parallelism)
    readers = [source.create_reader(s, i, parallelism) for i, s in enumerate(assignment)]
    heads = [read_n(reader, k) for reader in readers]
    snapshot = through_pickle([split for r in readers for split in r.snapshot_splits()])

    new_assignment = round_robin(snapshot, new_parallelism)
    rests = [
        read_all(source.create_reader(s, i, new_parallelism)) for i, s in enumerate(new_assignment)
    ]
    produced = [x for part in heads + rests for x in part]
    assert Counter(produced) == Counter(expected)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_every_bounded_source_says_it_is_bounded(case: SourceCase, tmp_path: Path) -> None:
    source, _ = case(tmp_path)
    assert isinstance(source, Source)
    assert source.boundedness is Boundedness.BOUNDED


# --- NumberSequenceSource ----------------------------------------------------------------------


def test_number_sequence_splits_into_parallelism_contiguous_ranges() -> None:
    splits = NumberSequenceSource(0, 9).create_splits(3)
    assert splits == [
        NumberSequenceSplit("0", 0, 3),
        NumberSequenceSplit("1", 4, 6),
        NumberSequenceSplit("2", 7, 9),
    ]


def test_number_sequence_makes_fewer_splits_than_parallelism_for_a_short_range() -> None:
    assert NumberSequenceSource(1, 2).create_splits(4) == [
        NumberSequenceSplit("0", 1, 1),
        NumberSequenceSplit("1", 2, 2),
    ]


def test_number_sequence_includes_its_end_and_batches_up_to_max_records() -> None:
    source = NumberSequenceSource(-2, 4)
    reader = source.create_reader(source.create_splits(1), 0, 1)
    assert reader.poll_batch(5) == [-2, -1, 0, 1, 2]
    assert reader.snapshot_splits() == [NumberSequenceSplit("0", 3, 4)]
    assert reader.poll_batch(5) == [3, 4]
    assert reader.snapshot_splits() == []
    assert reader.poll_batch(5) is None


def test_number_sequence_rejects_start_after_end() -> None:
    with pytest.raises(ValueError, match="start"):
        NumberSequenceSource(3, 2)


# --- DataGeneratorSource -----------------------------------------------------------------------


def test_bounded_datagen_plans_contiguous_index_ranges() -> None:
    splits = DataGeneratorSource(str, count=10).create_splits(3)
    assert splits == [
        DataGeneratorSplit("0", 0, 4),
        DataGeneratorSplit("1", 4, 7),
        DataGeneratorSplit("2", 7, 10),
    ]


def test_datagen_with_count_zero_finishes_at_once() -> None:
    source = DataGeneratorSource(str, count=0)
    assert source.create_splits(2) == []
    assert source.create_reader([], 0, 2).poll_batch(10) is None


def test_unbounded_datagen_gives_subtask_i_every_pth_index() -> None:
    source = DataGeneratorSource(lambda i: i * 10)
    assert source.boundedness is Boundedness.CONTINUOUS_UNBOUNDED
    splits = source.create_splits(3)
    readers = [source.create_reader([s], i, 3) for i, s in enumerate(splits)]
    assert [r.poll_batch(4) for r in readers] == [
        [0, 30, 60, 90],
        [10, 40, 70, 100],
        [20, 50, 80, 110],
    ]


@pytest.mark.parametrize("k", [0, 1, 7])
def test_unbounded_datagen_resumes_exactly_with_the_same_parallelism(k: int) -> None:
    source = DataGeneratorSource(lambda i: i)
    splits = source.create_splits(2)
    readers = [source.create_reader([s], i, 2) for i, s in enumerate(splits)]
    heads = [read_n(r, k) for r in readers]
    restored = [
        source.create_reader(through_pickle(r.snapshot_splits()), i, 2)
        for i, r in enumerate(readers)
    ]
    tails = [read_n(r, 5) for r in restored]
    assert heads[0] + tails[0] == list(range(0, 2 * (k + 5), 2))
    assert heads[1] + tails[1] == list(range(1, 2 * (k + 5), 2))


def test_unbounded_datagen_rescaled_generates_every_index_once() -> None:
    source = DataGeneratorSource(lambda i: i)
    readers = [source.create_reader([s], i, 3) for i, s in enumerate(source.create_splits(3))]
    produced = [x for r in readers for x in read_n(r, 4)]
    snapshot = [s for r in readers for s in r.snapshot_splits()]
    one_reader = source.create_reader(snapshot, 0, 1)
    produced += read_n(one_reader, 30, batch=5)  # 10 more from each of the 3 splits
    assert sorted(produced) == list(range(42))


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_rate_limited_reader_returns_empty_batches_when_throttled_and_never_sleeps_long() -> None:
    fake = FakeTime()
    limiter = RateLimiter(0.5, clock=fake.clock, sleep=fake.sleep)  # one record per 2 s
    reader = DataGeneratorReader(lambda i: i, [DataGeneratorSplit("0", 0, None)], limiter)
    assert reader.poll_batch(100) == [0]
    assert reader.poll_batch(100) == []
    assert reader.poll_batch(100) == []
    assert max(fake.sleeps) <= 0.05
    fake.now += 2.0
    assert reader.poll_batch(100) == [1]


def test_rate_limiter_allows_rate_per_second_and_bursts_at_most_one_second() -> None:
    fake = FakeTime()
    limiter = RateLimiter(10, clock=fake.clock, sleep=fake.sleep)
    assert limiter.acquire_up_to(100) == 1
    fake.now += 0.5
    assert limiter.acquire_up_to(100) == 5
    fake.now += 60
    assert limiter.acquire_up_to(100) == 10


def test_datagen_rate_is_shared_evenly_among_readers() -> None:
    source = DataGeneratorSource(str, records_per_second=30)
    readers = [source.create_reader([s], i, 3) for i, s in enumerate(source.create_splits(3))]
    assert [r.rate_limiter.rate for r in readers] == [10, 10, 10]


def test_datagen_rejects_negative_count_and_non_positive_rate() -> None:
    with pytest.raises(ValueError, match="count"):
        DataGeneratorSource(str, count=-1)
    with pytest.raises(ValueError, match="records_per_second"):
        DataGeneratorSource(str, records_per_second=0)


# --- CollectionSource --------------------------------------------------------------------------


def test_collection_has_one_split_whatever_the_parallelism() -> None:
    source = CollectionSource([1, 2, 3])
    assert source.create_splits(4) == [CollectionSplit("0", 0)]


def test_collection_readers_without_a_split_finish_at_once() -> None:
    assert CollectionSource([1, 2, 3]).create_reader([], 2, 4).poll_batch(10) is None


def test_collection_copies_its_elements() -> None:
    elements = [1, 2]
    source = CollectionSource(elements)
    elements.append(3)
    assert read_all(source.create_reader(source.create_splits(1), 0, 1)) == [1, 2]


# --- FileSource ----------------------------------------------------------------------------------


def lines_of(*paths: str, **format_kwargs: str) -> list[str]:
    fmt = StreamFormat.text_line_format(**format_kwargs)
    source = FileSource.for_record_stream_format(fmt, *paths).build()
    return read_all(source.create_reader(source.create_splits(1), 0, 1))


def test_file_source_strips_lf_and_crlf_and_reads_a_last_line_without_newline(
    tmp_path: Path,
) -> None:
    f = write(tmp_path / "f.txt", b"one\r\ntwo\nthree\r\n\r\nlast")
    assert lines_of(str(f)) == ["one", "two", "three", "", "last"]


def test_file_source_keeps_a_lone_carriage_return(tmp_path: Path) -> None:
    f = write(tmp_path / "f.txt", b"a\rb\nc\r")
    assert lines_of(str(f)) == ["a\rb", "c\r"]


def test_file_source_reads_nothing_from_empty_files(tmp_path: Path) -> None:
    write(tmp_path / "d" / "empty1", b"")
    write(tmp_path / "d" / "empty2", b"")
    write(tmp_path / "d" / "x", b"x\n")
    assert lines_of(str(tmp_path / "d")) == ["x"]


def test_file_source_decodes_unicode_and_keeps_byte_offsets_exact(tmp_path: Path) -> None:
    data = "héllo\nwörld ✓\n日本語\n".encode()
    f = write(tmp_path / "u.txt", data)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(f)).build()
    reader = source.create_reader(source.create_splits(1), 0, 1)
    assert reader.poll_batch(2) == ["héllo", "wörld ✓"]
    (split,) = reader.snapshot_splits()
    assert split.offset == len("héllo\nwörld ✓\n".encode())
    assert split.line_number == 2
    assert data[split.offset :].decode() == "日本語\n"


def test_file_source_honours_an_ascii_compatible_charset(tmp_path: Path) -> None:
    f = write(tmp_path / "l1.txt", "café\nnaïve\n".encode("latin-1"))
    assert lines_of(str(f), charset_name="ISO-8859-1") == ["café", "naïve"]


def test_file_source_rejects_charsets_that_are_not_ascii_compatible() -> None:
    with pytest.raises(ValueError, match="ASCII-compatible"):
        StreamFormat.text_line_format("UTF-16")


def test_file_source_names_the_file_and_line_that_cannot_be_decoded(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.txt", b"ok\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"bad\.txt: line 2 is not valid"):
        lines_of(str(f))


def test_file_source_walks_a_directory_tree_in_sorted_order_skipping_hidden_entries(
    tmp_path: Path,
) -> None:
    root = tmp_path / "tree"
    write(root / "b.txt", b"b\n")
    write(root / "a" / "z.txt", b"a/z\n")
    write(root / "a" / "y" / "x.txt", b"a/y/x\n")
    write(root / ".hidden.txt", b"hidden\n")
    write(root / "_SUCCESS", b"marker\n")
    write(root / ".staging" / "s.txt", b"staged\n")
    write(root / "_tmp" / "t.txt", b"temporary\n")
    write(root / "c" / ".part-0.inprogress", b"in progress\n")
    assert lines_of(str(root)) == ["a/y/x", "a/z", "b"]


def test_file_source_reads_several_paths_in_the_given_order_each_file_once(tmp_path: Path) -> None:
    a = write(tmp_path / "d" / "a.txt", b"a\n")
    b = write(tmp_path / "b.txt", b"b\n")
    assert lines_of(str(b), str(tmp_path / "d"), str(a)) == ["b", "a"]


def test_file_source_reads_an_explicitly_named_hidden_file(tmp_path: Path) -> None:
    f = write(tmp_path / "_data.txt", b"explicit\n")
    assert lines_of(str(f)) == ["explicit"]


def test_file_source_plans_one_split_per_file_from_offset_zero(tmp_path: Path) -> None:
    write(tmp_path / "d" / "1.txt", b"1\n")
    write(tmp_path / "d" / "2.txt", b"2\n")
    source = FileSource.for_record_stream_format(
        StreamFormat.text_line_format(), str(tmp_path / "d")
    ).build()
    assert source.create_splits(4) == [
        FileSourceSplit("0", str(tmp_path / "d" / "1.txt")),
        FileSourceSplit("1", str(tmp_path / "d" / "2.txt")),
    ]


def test_a_job_reading_a_missing_path_is_refused_at_submission_naming_it(tmp_path: Path) -> None:
    # the paths are checked with the job's filesystem options, known only at submission
    missing = str(tmp_path / "nope")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), missing).build()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(source, None, "files").print()
    with pytest.raises(FileNotFoundError, match="nope"):
        env._job_spec("reads a missing path")


def test_file_source_split_planning_fails_naming_a_path_removed_after_build(
    tmp_path: Path,
) -> None:
    f = write(tmp_path / "gone.txt", b"x\n")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(f)).build()
    f.unlink()
    with pytest.raises(FileNotFoundError, match=r"gone\.txt"):
        source.create_splits(1)


def test_file_source_accepts_file_urls(tmp_path: Path) -> None:
    f = write(tmp_path / "f.txt", b"via url\n")
    assert lines_of(f"file://{f}") == ["via url"]


def test_file_source_reads_other_fsspec_filesystems_and_resumes_there() -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe("/tidegate-src-test/a.txt", b"m1\nm2\nm3\n")
    try:
        source = FileSource.for_record_stream_format(
            StreamFormat.text_line_format(), "memory://tidegate-src-test"
        ).build()
        reader = source.create_reader(source.create_splits(1), 0, 1)
        assert reader.poll_batch(1) == ["m1"]
        (split,) = through_pickle(reader.snapshot_splits())
        assert split.path == "memory:///tidegate-src-test/a.txt"
        assert read_all(source.create_reader([split], 0, 1)) == ["m2", "m3"]
    finally:
        fs.rm("/tidegate-src-test", recursive=True)


def test_file_source_is_importable_from_the_pyflink_path() -> None:
    assert file_system.FileSource is FileSource
    assert file_system.StreamFormat is StreamFormat

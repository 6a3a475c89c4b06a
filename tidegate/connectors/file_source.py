"""A bounded source reading records (text lines, CSV or JSON-lines rows, Parquet rows) from
files on any fsspec filesystem (Flink's FileSource).

Build it like PyFlink:
`FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()`, or
`FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(row_type=t), *paths).build()`.
"""

from __future__ import annotations

import codecs
import posixpath
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import islice
from typing import IO, Any, Protocol

from fsspec.implementations.local import LocalFileSystem

from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.connectors.base import Boundedness
from tidegate.formats.base import FormatError

__all__ = [
    "BulkFormat",
    "FileSource",
    "FileSourceBuilder",
    "FileSourceReader",
    "FileSourceSplit",
    "LineRecordFormat",
    "StreamFormat",
    "TextLineFormat",
]


@dataclass(frozen=True, slots=True)
class FileSourceSplit:
    """One whole file and where reading resumes. For a StreamFormat: at byte `offset`, the
    start of line `line_number` (0-based: the number of lines already read). For a BulkFormat
    (Flink's checkpointed position: an offset and the records after it): in block `offset`
    (a Parquet row group) after its first `line_number` records."""

    split_id: str
    path: str
    offset: int = 0
    line_number: int = 0


class StreamFormat:
    """How a file's byte stream becomes records (PyFlink's StreamFormat).

    The reader's contract: `read_batch(stream, max_records, where, first_line)` reads on from
    the stream's position, which is the start of line `first_line` (0-based) of the file
    `where`, and returns `(records, bytes consumed, lines consumed, reached end of file)`;
    consumed bytes end at a line boundary, so a checkpointed offset resumes exactly. Lines that
    give no record (a header, a comment) count as consumed."""

    def read_batch(
        self, stream: IO[bytes], max_records: int, where: str = "?", first_line: int = 0
    ) -> tuple[list[Any], int, int, bool]:
        raise NotImplementedError(f"{type(self).__name__} must implement read_batch()")

    @staticmethod
    def text_line_format(
        charset_name: str = "UTF-8", *, charset: str | None = None
    ) -> TextLineFormat:
        """Lines of text without their `\\n` / `\\r\\n` ending (`charset` is an alias)."""
        return TextLineFormat(charset or charset_name)


@dataclass(frozen=True, slots=True)
class TextLineFormat(StreamFormat):
    """Text lines decoded one by one, so byte offsets stay exact.

    Only charsets in which `\\n` is the single byte 0x0A and never part of another character
    (UTF-8, ASCII, Latin-1, cp1252, ...) are supported; UTF-16/32 are rejected.
    """

    charset: str = "UTF-8"

    def __post_init__(self) -> None:
        try:
            codecs.lookup(self.charset)
        except LookupError:
            raise ValueError(f"unknown charset {self.charset!r}") from None
        if "\n".encode(self.charset) != b"\n" or "a".encode(self.charset) != b"a":
            raise ValueError(f"charset {self.charset!r} is not ASCII-compatible")

    def read_lines(
        self, stream: IO[bytes], max_records: int, where: str = "?", first_line: int = 0
    ) -> tuple[list[str], int, bool]:
        """Read up to `max_records` lines: (lines, bytes consumed, reached end of file)."""
        raws = list(islice(stream, max(max_records, 0)))
        eof = len(raws) < max_records
        try:
            text = b"".join(raws).decode(self.charset)
        except UnicodeDecodeError:
            for number, raw in enumerate(raws, start=first_line + 1):
                try:
                    raw.decode(self.charset)
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{where}: line {number} is not valid {self.charset}") from exc
            raise
        lines = text.split("\n")
        last = lines.pop()  # '' after a final '\n', else a last line without one (kept as is)
        if "\r" in text:
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        if last:
            lines.append(last)
        return lines, sum(map(len, raws)), eof

    def read_batch(
        self, stream: IO[bytes], max_records: int, where: str = "?", first_line: int = 0
    ) -> tuple[list[Any], int, int, bool]:
        lines, consumed, eof = self.read_lines(stream, max_records, where, first_line)
        return lines, consumed, len(lines), eof


_UTF8_LINES = TextLineFormat("UTF-8")


class LineRecordFormat(StreamFormat):
    """A StreamFormat of UTF-8 text with one record per line (CSV, JSON lines): subclasses
    give the function that parses a line. Positions are byte offsets of lines, as for text."""

    def line_parser(self) -> Callable[[str, int], Any]:
        """`parse(line, number)` (called for each batch): the record of line `number` (1-based)
        of its file, None for a line that holds none (a header, a blank line); FormatError for
        a line that does not fit the format."""
        raise NotImplementedError(f"{type(self).__name__} must implement line_parser()")

    def read_batch(
        self, stream: IO[bytes], max_records: int, where: str = "?", first_line: int = 0
    ) -> tuple[list[Any], int, int, bool]:
        lines, consumed, eof = _UTF8_LINES.read_lines(stream, max_records, where, first_line)
        parse = self.line_parser()
        records = []
        for number, line in enumerate(lines, start=first_line + 1):
            try:
                record = parse(line, number)
            except FormatError as e:
                raise ValueError(f"{where}: line {number}: {e}") from None
            if record is not None:
                records.append(record)
        return records, consumed, len(lines), eof


class SplitReader(Protocol):
    """Reads the records of one split's file from its position (what a format creates)."""

    def read_batch(self, max_records: int) -> tuple[list[Any], FileSourceSplit | None]:
        """Up to `max_records` records and the split's position after them; None instead of a
        split once the file is exhausted (the records returned with it are its last)."""
        ...


@dataclass(slots=True)
class _StreamSplitReader:
    """A StreamFormat reading one file's byte stream, which is at the split's offset."""

    stream_format: StreamFormat
    stream: IO[bytes]
    split: FileSourceSplit

    def read_batch(self, max_records: int) -> tuple[list[Any], FileSourceSplit | None]:
        split = self.split
        records, consumed, lines, eof = self.stream_format.read_batch(
            self.stream, max_records, split.path, split.line_number
        )
        if eof:
            return records, None
        self.split = replace(
            split, offset=split.offset + consumed, line_number=split.line_number + lines
        )
        return records, self.split


class BulkFormat:
    """Reads a file in batches of records through its own reader (PyFlink's BulkFormat), for
    formats that are not a stream of lines (Parquet's row groups and footer)."""

    def create_reader(self, stream: IO[bytes], split: FileSourceSplit) -> SplitReader:
        """The reader of `split`'s file (`stream`: the file opened for reading, closed by the
        source), resuming at the split's position."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_reader()")


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _enumerate_files(path: str, filesystems: FileSystems) -> list[str]:
    """The files under `path` (itself if it is a file), sorted; hidden entries below it skipped."""
    fs, root = filesystems.resolve(path)
    if not fs.exists(root):
        raise FileNotFoundError(f"file source path does not exist: {path}")
    if not fs.isdir(root):
        found = [root]
    else:
        found = []
        for dirpath, dirnames, filenames in fs.walk(root, topdown=True):
            dirnames[:] = sorted(d for d in dirnames if not _is_hidden(d))
            found.extend(posixpath.join(dirpath, f) for f in filenames if not _is_hidden(f))
        found.sort()
    if isinstance(fs, LocalFileSystem):
        return found
    return [fs.unstrip_protocol(p) for p in found]


class FileSource:
    """Reads every record of every file under `paths` once (bounded).

    Each path is a file or a directory (enumerated recursively in sorted order, skipping files
    and directories whose names start with '.' or '_', as Flink's default file filter does;
    paths given explicitly are always read). One split per file; readers read their files in
    split order. Paths are fsspec URLs or local paths, opened with the job's `filesystems`
    options (set when the job is submitted, which checks that every path exists).
    """

    boundedness = Boundedness.BOUNDED

    def __init__(
        self,
        stream_format: StreamFormat | BulkFormat,
        paths: tuple[str, ...],
        filesystems: FileSystems = NO_OPTIONS,
    ) -> None:
        if not paths:
            raise ValueError("a FileSource needs at least one path")
        if not isinstance(stream_format, StreamFormat | BulkFormat):
            raise TypeError(
                f"a FileSource reads with a StreamFormat or a BulkFormat, got {stream_format!r}"
            )
        self.stream_format = stream_format
        self.paths = tuple(str(p) for p in paths)
        self.filesystems = filesystems

    def with_filesystems(self, filesystems: FileSystems) -> FileSource:
        """This source reading with the job's filesystem options (connectors/base.py); raises
        FileNotFoundError naming a path that does not exist."""
        for path in self.paths:
            fs, root = filesystems.resolve(path)
            if not fs.exists(root):
                raise FileNotFoundError(f"file source path does not exist: {path}")
        return FileSource(self.stream_format, self.paths, filesystems)

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        return FileSourceBuilder(stream_format, tuple(paths))

    @staticmethod
    def for_bulk_file_format(bulk_format: BulkFormat, *paths: str) -> FileSourceBuilder:
        """A source reading whole files with `bulk_format` (ParquetColumnarRowInputFormat)."""
        return FileSourceBuilder(bulk_format, tuple(paths))

    def get_produced_type(self) -> Any:
        """The type its format declares for the records (a CsvReaderFormat's, a JSON-lines or
        Parquet format's row type), None
        for text lines (PyFlink's text line format declares STRING; an undeclared stream of
        str behaves the same here)."""
        produced = getattr(self.stream_format, "get_produced_type", None)
        return produced() if callable(produced) else None

    def create_splits(self, parallelism: int) -> list[FileSourceSplit]:
        seen: dict[str, None] = {}
        for path in self.paths:
            seen.update(dict.fromkeys(_enumerate_files(path, self.filesystems)))
        return [FileSourceSplit(str(i), file) for i, file in enumerate(seen)]

    def create_reader(
        self, splits: list[FileSourceSplit], subtask_index: int, parallelism: int
    ) -> FileSourceReader:
        return FileSourceReader(self.stream_format, splits, self.filesystems)

    def __repr__(self) -> str:
        return f"FileSource({self.stream_format!r}, paths={list(self.paths)!r})"


class FileSourceBuilder:
    """PyFlink's FileSourceBuilder; only the static (bounded) file set is supported."""

    def __init__(self, stream_format: StreamFormat | BulkFormat, paths: tuple[str, ...]) -> None:
        self._stream_format = stream_format
        self._paths = paths

    def process_static_file_set(self) -> FileSourceBuilder:
        """Read the files present when the job starts, then finish (the default)."""
        return self

    def build(self) -> FileSource:
        """The source; its paths are checked when the job is submitted, with the job's
        filesystem options."""
        return FileSource(self._stream_format, self._paths)


class FileSourceReader:
    """Reads its files one after another from their splits' positions."""

    def __init__(
        self,
        stream_format: StreamFormat | BulkFormat,
        splits: list[FileSourceSplit],
        filesystems: FileSystems = NO_OPTIONS,
    ) -> None:
        self._format = stream_format
        self._filesystems = filesystems
        self._splits = deque(splits)
        self._stream: IO[bytes] | None = None
        self._reader: SplitReader | None = None

    def _open_current(self) -> SplitReader:
        split = self._splits[0]
        fs, path = self._filesystems.resolve(split.path)
        try:  # the builtin open() skips a wrapper layer on local files
            stream = open(path, "rb") if isinstance(fs, LocalFileSystem) else fs.open(path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            raise FileNotFoundError(f"file source file does not exist: {split.path}") from None
        self._stream = stream
        if isinstance(self._format, BulkFormat):
            return self._format.create_reader(stream, split)
        stream.seek(split.offset)
        return _StreamSplitReader(self._format, stream, split)

    def _finish_current(self) -> None:
        self.close()
        self._splits.popleft()

    def poll_batch(self, max_records: int) -> list[Any] | None:
        while self._splits:
            if self._reader is None:
                self._reader = self._open_current()
            records, split = self._reader.read_batch(max_records)
            if split is None:
                self._finish_current()
            else:
                self._splits[0] = split
            if records or max_records <= 0:
                return records
        return None

    def snapshot_splits(self) -> list[FileSourceSplit]:
        return list(self._splits)

    def close(self) -> None:
        self._reader = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None

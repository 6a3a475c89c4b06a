"""Parquet files of Rows, written by a bulk-format FileSink and read by a FileSource, with
pyarrow (PyFlink's `pyflink.datastream.formats.parquet`):

    row_type = Types.ROW_NAMED(["id", "name"], [Types.LONG(), Types.STRING()])
    sink = FileSink.for_bulk_format(out, ParquetBulkWriters.for_row_type(row_type)).build()
    source = FileSource.for_bulk_file_format(
        ParquetColumnarRowInputFormat(row_type=row_type), path).build()

The column types follow tidegate/formats/arrow_row.py. PyFlink types these formats with the
Table API's `DataTypes.ROW`, which tidegate does not have: here they take `Types.ROW_NAMED`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from tidegate.common.configuration import Configuration
from tidegate.common.serialization import BulkWriter, RowDataBulkWriterFactory
from tidegate.common.typeinfo import RowTypeInfo
from tidegate.connectors.file_source import BulkFormat, FileSourceSplit
from tidegate.formats.arrow_row import arrow_schema, batch_reader, batch_writer
from tidegate.formats.base import row_type as checked_row_type

__all__ = [
    "ParquetBulkWriters",
    "ParquetColumnarRowInputFormat",
    "ParquetWriterFactory",
]

#: the format in error messages
FORMAT = "Parquet"
#: rows per row group written (and buffered in memory as Arrow columns until then)
DEFAULT_ROW_GROUP_SIZE = 128 * 1024


class ParquetWriterFactory(RowDataBulkWriterFactory):
    """Creates a Parquet writer for each part file of a bulk-format FileSink: rows are
    buffered as Arrow columns and written in row groups of `row_group_size` rows (the last
    group of a file, written when the sink rolls it at a checkpoint, may be smaller);
    `compression` is a pyarrow codec name (snappy, zstd, gzip, none, ...)."""

    def __init__(
        self,
        row_type: RowTypeInfo,
        utc_timestamp: bool = False,
        row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
        compression: str = "snappy",
    ) -> None:
        super().__init__(checked_row_type(row_type, "ParquetBulkWriters.for_row_type"))
        if row_group_size < 1:
            raise ValueError(f"row_group_size must be >= 1, got {row_group_size}")
        self.utc_timestamp = utc_timestamp
        self.row_group_size = row_group_size
        self.compression = compression
        self.schema = arrow_schema(self.row_type, FORMAT, utc_timestamp)  # TypeError: unsupported
        try:
            available = compression.lower() == "none" or pa.Codec.is_available(compression)
        except ValueError:
            available = False
        if not available:
            raise ValueError(
                f"unknown or unavailable Parquet compression {compression!r}: use snappy, "
                "zstd, gzip, brotli, lz4 or none"
            )

    def create(self, stream: IO[bytes]) -> BulkWriter:
        return _ParquetWriter(self, stream)

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.row_type, self.utc_timestamp, self.row_group_size, self.compression)
        return ParquetWriterFactory, args

    def __repr__(self) -> str:
        return f"ParquetWriterFactory({self.row_type!r}, row_group_size={self.row_group_size})"


class _ParquetWriter(BulkWriter):
    """One part file: record batches collect until a row group is full, then are written."""

    def __init__(self, factory: ParquetWriterFactory, stream: IO[bytes]) -> None:
        self._group_size = factory.row_group_size
        self._convert = batch_writer(factory.row_type, FORMAT, factory.utc_timestamp)
        self._writer = pq.ParquetWriter(stream, factory.schema, compression=factory.compression)
        self._batches: list[pa.RecordBatch] = []
        self._buffered = 0

    def add_elements(self, elements: list[Any]) -> None:
        batch = self._convert(elements)
        self._batches.append(batch)
        self._buffered += batch.num_rows
        if self._buffered >= self._group_size:
            self._write_buffered()

    def _write_buffered(self) -> None:
        if self._buffered:
            table = pa.Table.from_batches(self._batches)
            self._writer.write_table(table, row_group_size=self._group_size)
        self._batches, self._buffered = [], 0

    def finish(self) -> None:
        self._write_buffered()
        self._writer.close()  # writes the footer; the stream stays open (the sink closes it)

    def abort(self) -> None:
        self._batches, self._buffered = [], 0
        self._writer.is_open = False  # so pyarrow never writes a footer into the closed stream


class ParquetBulkWriters:
    """PyFlink's `ParquetBulkWriters`."""

    @staticmethod
    def for_row_type(
        row_type: RowTypeInfo,
        hadoop_config: Configuration | None = None,
        utc_timestamp: bool = False,
    ) -> ParquetWriterFactory:
        """A writer factory for Rows of `row_type` (`Types.ROW_NAMED`); `hadoop_config` is
        accepted for PyFlink compatibility and must be empty (there is no Hadoop here);
        `utc_timestamp`: SQL_TIMESTAMP values are UTC (stored adjusted to UTC) instead of
        local date-times."""
        _no_hadoop(hadoop_config)
        return ParquetWriterFactory(row_type, utc_timestamp)


def _no_hadoop(hadoop_config: Configuration | None) -> None:
    if hadoop_config is not None and hadoop_config.to_dict():
        raise ValueError(
            "hadoop_config is not supported (tidegate writes Parquet with pyarrow, without "
            f"Hadoop): pass None or an empty Configuration, got {hadoop_config.to_dict()}"
        )


@dataclass(frozen=True)
class ParquetColumnarRowInputFormat(BulkFormat):
    """Reads Parquet files into named Rows of `row_type` for `FileSource.for_bulk_file_format`
    (PyFlink's arguments, in its order; `hadoop_config` must be None or empty).

    The declared fields are read by name (`is_case_sensitive=False`: ignoring case) and cast to
    their declared types; a field the file lacks, or a column that cannot be cast, fails the
    job naming the file. `batch_size`: at most this many rows per batch. A split's position is
    (row group, rows of it already read): a restore resumes exactly after the last row read.
    """

    hadoop_config: Configuration | None = None
    row_type: RowTypeInfo | None = None
    batch_size: int = 2048
    is_utc_timestamp: bool = False
    is_case_sensitive: bool = True

    def __post_init__(self) -> None:
        _no_hadoop(self.hadoop_config)
        object.__setattr__(self, "hadoop_config", None)
        checked_row_type(self.row_type, "ParquetColumnarRowInputFormat(row_type=...)")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        arrow_schema(
            self.row_type, FORMAT, self.is_utc_timestamp
        )  # TypeError: unsupported field type

    def get_produced_type(self) -> RowTypeInfo:
        return self.row_type  # type: ignore[return-value]

    def create_reader(self, stream: IO[bytes], split: FileSourceSplit) -> _ParquetFileReader:
        return _ParquetFileReader(self, stream, split)


class _ParquetFileReader:
    """Reads one file from its split's position, a row group at a time."""

    def __init__(
        self, fmt: ParquetColumnarRowInputFormat, stream: IO[bytes], split: FileSourceSplit
    ) -> None:
        row_type: RowTypeInfo = fmt.row_type  # type: ignore[assignment]
        self._split = split
        self._batch_size = fmt.batch_size
        try:
            self._file = pq.ParquetFile(stream)
        except pa.ArrowException as e:
            raise ValueError(f"{split.path}: not a readable Parquet file: {e}") from None
        self._schema = arrow_schema(row_type, FORMAT, fmt.is_utc_timestamp)
        self._columns = _file_columns(
            self._file.schema_arrow, row_type, fmt.is_case_sensitive, split
        )
        self._check_casts()
        self._to_rows = batch_reader(row_type, fmt.is_utc_timestamp)
        self._group: pa.Table | None = None  # the row group `split.offset`, once read

    def _check_casts(self) -> None:
        file_schema = self._file.schema_arrow
        for column, field in zip(self._columns, self._schema, strict=True):
            have = file_schema.field(column).type
            if have != field.type and not pa.types.is_null(have):
                try:
                    pa.array([], type=have).cast(field.type)
                except pa.ArrowException:
                    raise ValueError(
                        f"{self._split.path}: column {column!r} is {have}, which cannot be read "
                        f"as {field.type} (declared field {field.name!r})"
                    ) from None

    def read_batch(self, max_records: int) -> tuple[list[Any], FileSourceSplit | None]:
        split = self._split
        while split.offset < self._file.num_row_groups:
            if self._group is None:
                self._group = self._read_group(split.offset)
            remaining = self._group.num_rows - split.line_number
            if remaining <= 0:
                split = self._split = replace(split, offset=split.offset + 1, line_number=0)
                self._group = None
                continue
            n = min(max_records, self._batch_size, remaining)
            rows = self._to_rows(self._group.slice(split.line_number, n)) if n > 0 else []
            self._split = replace(split, line_number=split.line_number + n)
            return rows, self._split
        return [], None

    def _read_group(self, index: int) -> pa.Table:
        table = self._file.read_row_group(index, columns=self._columns)
        try:
            return table.rename_columns([f.name for f in self._schema]).cast(self._schema)
        except pa.ArrowException as e:
            raise ValueError(
                f"{self._split.path}: row group {index} does not fit the declared row type: {e}"
            ) from None


def _file_columns(
    file_schema: pa.Schema, row_type: RowTypeInfo, case_sensitive: bool, split: FileSourceSplit
) -> list[str]:
    """The file's column of each declared field, matched by name."""
    present = list(file_schema.names)
    by_name = {n if case_sensitive else n.lower(): n for n in present}
    columns = []
    for name in row_type.names:
        column = by_name.get(name if case_sensitive else name.lower())
        if column is None:
            raise ValueError(
                f"{split.path}: the Parquet file has no column {name!r} of the declared row "
                f"type (its columns: {present}"
                + ("" if case_sensitive else ", matched ignoring case")
                + ")"
            )
        columns.append(column)
    return columns

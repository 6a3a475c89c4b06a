"""How state becomes rows, and the schema of those rows.

One row shape per kind of state, chosen for Spark SQL (filter, join and GROUP BY on plain
columns; `collect_list` / `map_from_entries` rebuild a container when one is needed):

==========================================  ============================================
keyed value, reducing, aggregating state    ``key, value`` (aggregating: the accumulator)
keyed list state                            ``key, position, value``: one row per element,
                                            `position` its 0-based index in the key's list
keyed map state                             ``key, user_key, value``: one row per entry
split / union operator state                ``subtask, position, value``: one row per entry
broadcast state                             ``key, value``: one row per entry (one copy)
timers (`read_timers`)                      ``key, time_domain, timestamp``: one row per
                                            timer, `time_domain` EVENT_TIME or
                                            PROCESSING_TIME
==========================================  ============================================

With `include_key_group=True` keyed rows also get ``key_group`` and ``subtask`` (the subtask
that held the key group in the snapshot), for debugging placement.

The columns holding user data (`key`, `user_key`, `value`) are typed by the data: their schema
is inferred from a sample of the rows (as Spark infers a schema from Python objects), or given
with `schema=`; every row is checked against it, and a value that does not fit fails with an
error naming the state and key. With `raw=True` they are pickled bytes (BinaryType), which
holds any Python object: `pickle.loads` (or `cloudpickle.loads`) gives the object back, and the
writer takes such columns back with `raw=True`.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import cloudpickle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

__all__ = [
    "DATA_COLUMNS",
    "DEBUG_COLUMNS",
    "TIMER_STATE",
    "columns_for",
    "keyed_rows",
    "make_verifier",
    "raw_schema",
    "resolve_schema",
]

DEBUG_COLUMNS = ("key_group", "subtask")
#: columns that hold user objects (typed by the data, or pickled with raw=True)
DATA_COLUMNS = frozenset({"key", "user_key", "value"})

_COLUMNS = {
    "value": ("key", "value"),
    "reducing": ("key", "value"),
    "aggregating": ("key", "value"),
    "list": ("key", "position", "value"),
    "map": ("key", "user_key", "value"),
    "split": ("subtask", "position", "value"),
    "union": ("subtask", "position", "value"),
    "broadcast": ("key", "value"),
    "timers": ("key", "time_domain", "timestamp"),
}

#: the internal keyed map state the timer service keeps its timers in: under each key,
#: {(time domain, timestamp): True} (runtime/internal_timers.py)
TIMER_STATE = "__timers__"
#: TimeDomain values as the timer service stores them
_TIME_DOMAINS = {0: "EVENT_TIME", 1: "PROCESSING_TIME"}


def columns_for(kind: str, include_key_group: bool = False) -> tuple[str, ...]:
    """The column names of the rows of a state of `kind`."""
    columns = _COLUMNS[kind]
    return columns + DEBUG_COLUMNS if include_key_group else columns


def keyed_rows(kind: str, entries: dict[Any, Any]) -> Iterator[tuple[Any, ...]]:
    """The rows (without debug columns) of one key group's `{key: stored value}` of `kind`."""
    if kind == "list":
        for key, elements in entries.items():
            for position, element in enumerate(elements):
                yield key, position, element
    elif kind == "timers":
        for key, timers in entries.items():
            for domain, timestamp in timers:
                yield key, _TIME_DOMAINS.get(domain, str(domain)), timestamp
    elif kind == "map":
        for key, user_map in entries.items():
            for user_key, value in user_map.items():
                yield key, user_key, value
    else:
        for key, value in entries.items():
            yield key, value


def pickle_data_columns(columns: tuple[str, ...], row: tuple[Any, ...]) -> tuple[Any, ...]:
    """`row` with its user-data columns pickled (raw=True)."""
    return tuple(
        cloudpickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL) if c in DATA_COLUMNS else v
        for c, v in zip(columns, row, strict=True)
    )


def raw_schema(columns: tuple[str, ...]) -> StructType:
    """The schema of raw rows: user-data columns binary, the others (positions, subtasks,
    key groups) long."""
    types = {c: BinaryType() if c in DATA_COLUMNS else LongType() for c in columns}
    if "time_domain" in types:
        types["time_domain"] = _string()
    return StructType([StructField(c, t, True) for c, t in types.items()])


def resolve_schema(
    spark: Any,
    schema: StructType | str | None,
    columns: tuple[str, ...],
    sample: list[tuple[Any, ...]],
    what: str,
) -> StructType:
    """The row schema: `schema` (a StructType or DDL string) checked against `columns`, or
    inferred from `sample`. Raises TypeError saying what to do when the sample's values
    have no Spark SQL type or disagree in type."""
    if schema is not None:
        struct = schema if isinstance(schema, StructType) else _parse_ddl(spark, schema)
        if tuple(struct.names) != columns:
            raise ValueError(
                f"the schema for {what} has the columns {list(struct.names)}, but its rows "
                f"have the columns {list(columns)} (in this order); give a type for each, e.g. "
                f"{', '.join(f'{c} STRING' for c in columns)}"
            )
        return struct
    if not sample:
        # nothing to infer from: an empty DataFrame whose data columns are strings
        return StructType(
            [
                StructField(c, LongType() if c not in DATA_COLUMNS else _string(), True)
                for c in columns
            ]
        )
    try:
        return spark.createDataFrame(sample, list(columns)).schema
    except Exception as exc:  # PySparkTypeError/ValueError: no type, or types that do not merge
        raise TypeError(
            f"the values of {what} cannot be represented as Spark SQL columns ({exc}). Pass an "
            "explicit schema= that fits them, or raw=True to get pickled binary columns (any "
            "Python object; pickle.loads gives it back)."
        ) from None


def make_verifier(schema: StructType, what: str) -> Any:
    """A function checking one row against `schema` (on the executors), raising a TypeError
    naming the state and the row's first column (its key or subtask) when it does not fit."""
    from pyspark.sql.types import _make_type_verifier  # the check createDataFrame itself uses

    verify = _make_type_verifier(schema)

    def check(row: tuple[Any, ...]) -> tuple[Any, ...]:
        try:
            verify(row)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"the row of {what} for {schema.names[0]} {row[0]!r} does not fit the schema "
                f"{schema.simpleString()}: {exc}. The schema was inferred from a sample or "
                "given with schema=: pass a schema= that fits every value, or raw=True."
            ) from None
        return row

    return check


def _string() -> Any:
    from pyspark.sql.types import StringType

    return StringType()


def _parse_ddl(spark: Any, ddl: str) -> StructType:
    return spark.createDataFrame([], ddl).schema

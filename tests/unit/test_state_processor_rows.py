"""The pure parts of the state processor: state -> rows, rows -> per-subtask tables."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql import Row

from tidegate.state.keygroups import key_group_range, stable_hash
from tidegate.state_processor.bootstrap import KeyedSpec, _build_tables, keyed_records
from tidegate.state_processor.rows import columns_for, keyed_rows, pickle_data_columns


def _spec(kind: str, **overrides) -> KeyedSpec:
    fields = dict(
        state_name="s",
        kind=kind,
        key_column="key",
        value_column="value",
        user_key_column="user_key" if kind == "map" else None,
        position_column="position" if kind == "list" else None,
        raw=False,
    )
    return KeyedSpec(**{**fields, **overrides})


def test_each_kind_of_state_has_its_row_shape():
    assert list(keyed_rows("value", {"a": 1})) == [("a", 1)]
    assert list(keyed_rows("list", {"a": [5, 6]})) == [("a", 0, 5), ("a", 1, 6)]
    assert list(keyed_rows("map", {"a": {"x": 1, "y": 2}})) == [("a", "x", 1), ("a", "y", 2)]
    assert columns_for("aggregating") == ("key", "value")
    assert columns_for("list", include_key_group=True) == (
        "key", "position", "value", "key_group", "subtask"
    )  # fmt: skip
    assert columns_for("split") == ("subtask", "position", "value")


def test_raw_rows_pickle_only_the_user_data_columns():
    row = pickle_data_columns(("key", "position", "value"), ("a", 3, {1, 2}))
    assert pickle.loads(row[0]) == "a" and row[1] == 3 and pickle.loads(row[2]) == {1, 2}


def test_records_go_to_the_subtask_owning_their_key_group_and_structs_become_tuples():
    rows = [Row(key=Row(a=1, b="x"), value=Row(n=2, m=[1, 2])), Row(key=7, value=None)]
    records = list(keyed_records(_spec("value"), 3, 128, rows))
    (subtask, (_name, key, _extra, value)), (_, (_, key2, _, value2)) = records
    assert key == (1, "x") and type(key) is tuple and value == (2, [1, 2])
    assert stable_hash(key) % 128 in key_group_range(subtask, 3, 128)
    assert (key2, value2) == (7, None)


def test_list_elements_are_ordered_by_position_then_arrival():
    records = [("s", "k", 2, "c"), ("s", "k", 0, "a"), ("s", "k", 1, "b"), ("s", "j", None, "z")]
    tables = _build_tables({"s": "list"}, records)
    assert tables == {"s": ("list", {"k": ["a", "b", "c"], "j": ["z"]})}


def test_duplicate_keys_and_user_keys_are_refused_and_none_values_are_absent():
    with pytest.raises(ValueError, match="key 'k' appears in more than one row"):
        _build_tables({"s": "value"}, [("s", "k", None, 1), ("s", "k", None, 2)])
    with pytest.raises(ValueError, match="user key 'u' of key 'k'"):
        _build_tables({"m": "map"}, [("m", "k", "u", 1), ("m", "k", "u", 2)])
    tables = _build_tables({"s": "value", "t": "value"}, [("s", "k", None, None)])
    assert tables == {"s": ("value", {}), "t": ("value", {})}

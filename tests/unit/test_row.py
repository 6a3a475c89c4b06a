"""Row and RowKind (tidegate.common.types) behave as PyFlink 2.x's."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import pytest

from tidegate.common import Row, RowKind
from tidegate.common import types as types_module


def test_row_and_row_kind_are_at_pyflinks_paths():
    assert types_module.Row is Row
    assert types_module.RowKind is RowKind


def test_a_positional_row_reads_by_index_slice_and_iteration():
    row = Row("hi", 0, 5)
    assert row[0] == "hi" and row[-1] == 5
    assert row[1:] == [0, 5]
    assert list(row) == ["hi", 0, 5]
    assert len(row) == 3
    assert "hi" in row and "nope" not in row  # a positional row: membership of values
    assert repr(row) == "<Row('hi', 0, 5)>"


def test_a_named_row_keeps_the_given_field_order():
    row = Row(name="Alice", age=11)
    assert repr(row) == "Row(name='Alice', age=11)"
    assert list(row) == ["Alice", 11]
    assert row.name == "Alice" and row.age == 11
    assert row["name"] == "Alice" and row[1] == 11
    assert "name" in row and "Alice" not in row  # a named row: membership of field names
    assert row.as_dict() == {"name": "Alice", "age": 11}


def test_as_dict_recursive_converts_nested_rows_in_lists_and_dicts():
    row = Row(key=1, value=Row(name="a", age=2), items=[Row(x=1)], by={"k": Row(y=2)})
    assert row.as_dict() == {
        "key": 1,
        "value": Row(name="a", age=2),
        "items": [Row(x=1)],
        "by": {"k": Row(y=2)},
    }
    assert row.as_dict(recursive=True) == {
        "key": 1,
        "value": {"name": "a", "age": 2},
        "items": [{"x": 1}],
        "by": {"k": {"y": 2}},
    }
    with pytest.raises(TypeError, match="positional"):
        Row(1, 2).as_dict()


def test_a_row_class_creates_named_rows():
    Person = Row("name", "age")
    assert repr(Person) == "<Row('name', 'age')>"
    assert "name" in Person
    alice = Person("Alice", 11)
    assert alice == Row(name="Alice", age=11)
    assert alice.age == 11
    with pytest.raises(ValueError, match="at most 2 values"):
        Person("Alice", 11, "extra")


def test_fields_are_set_by_index_or_name_not_as_attributes():
    row = Row(name="a", age=1)
    row["age"] = 2
    row[0] = "b"
    assert row == Row(name="b", age=2)
    with pytest.raises(AttributeError, match=r"row\['age'\] = value"):
        row.age = 3
    with pytest.raises(AttributeError, match="no field 'height'"):
        _ = row.height
    with pytest.raises(ValueError, match="'height' is not a field"):
        _ = row["height"]
    with pytest.raises(KeyError, match="positional"):
        _ = Row(1)["name"]
    with pytest.raises(AttributeError):
        _ = Row(1).name


def test_row_kind_defaults_to_insert_and_prints_flinks_short_strings():
    row = Row(1)
    assert row.get_row_kind() is RowKind.INSERT
    row.set_row_kind(RowKind.DELETE)
    assert row.get_row_kind() is RowKind.DELETE
    assert [str(k) for k in RowKind] == ["+I", "-U", "+U", "-D"]
    assert [k.value for k in RowKind] == [0, 1, 2, 3]
    assert Row.of_kind(RowKind.UPDATE_AFTER, a=1).get_row_kind() is RowKind.UPDATE_AFTER
    with pytest.raises(TypeError):
        row.set_row_kind("+I")  # type: ignore[arg-type]


def test_equality_is_kind_and_values_and_hashing_agrees():
    assert Row(1, "a") == Row(1, "a")
    assert Row(1, "a") != Row("a", 1)
    assert Row(1, "a") != (1, "a")
    assert Row(a=1) != Row(1)  # named and positional rows are never equal
    assert Row(a=1, b=2) == Row(b=2, a=1)  # the same names with the same values
    assert hash(Row(a=1, b=2)) == hash(Row(b=2, a=1))
    assert Row(a=1, b=2) != Row(a=1, c=2)
    assert hash(Row(1, "a")) == hash(Row(1, "a"))
    deleted = Row(1, "a")
    deleted.set_row_kind(RowKind.DELETE)
    assert deleted != Row(1, "a")
    assert len({Row(1), Row(1), Row(2)}) == 2


def test_get_fields_by_names_and_set_field_names():
    row = Row(a=1, b=2, c=3)
    assert row.get_fields_by_names(["c", "a"]) == [3, 1]
    with pytest.raises(ValueError, match=r"\['z'\]"):
        row.get_fields_by_names(["z"])
    positional = Row(1, 2)
    positional.set_field_names(["x", "y"])
    assert positional.y == 2 and repr(positional) == "Row(x=1, y=2)"


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_rows_pickle_with_names_values_and_kind(dumps):
    named = Row.of_kind(RowKind.UPDATE_BEFORE, name="a", nested=Row(1, [2]))
    for row in (named, Row(1, None, "x"), Row("name", "age")):
        back = pickle.loads(dumps(row))
        assert back == row
        assert repr(back) == repr(row)
        assert back.get_row_kind() is row.get_row_kind()
    assert copy.deepcopy(named) == named
    assert copy.copy(named) == named

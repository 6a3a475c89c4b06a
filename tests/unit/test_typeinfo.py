"""Types returns real TypeInformation objects: PyFlink's factory names and reprs, equal and
hashable by value, picklable, checked when built."""

from __future__ import annotations

import pickle

import pytest

from tidegate.common import TypeInformation, Types
from tidegate.common.typeinfo import (
    BasicArrayTypeInfo,
    BasicType,
    BasicTypeInfo,
    ListTypeInfo,
    MapTypeInfo,
    PickledBytesTypeInfo,
    RowTypeInfo,
    TupleTypeInfo,
    as_type_info,
)

BASIC = {
    "STRING": "String",
    "BYTE": "Byte",
    "BOOLEAN": "Boolean",
    "SHORT": "Short",
    "INT": "Integer",
    "LONG": "Long",
    "FLOAT": "Float",
    "DOUBLE": "Double",
    "CHAR": "Char",
    "BIG_INT": "BigInteger",
    "BIG_DEC": "BigDecimal",
    "INSTANT": "Instant",
}


@pytest.mark.parametrize(("factory", "java_name"), BASIC.items())
def test_basic_types_repr_as_pyflink_does(factory, java_name):
    t = getattr(Types, factory)()
    assert isinstance(t, BasicTypeInfo) and isinstance(t, TypeInformation)
    assert repr(t) == java_name
    assert t == getattr(Types, factory)() and hash(t) == hash(getattr(Types, factory)())


def test_the_other_types_repr_as_pyflink_does():
    s, i = Types.STRING(), Types.INT()
    cases = {
        Types.SQL_DATE(): "DateTypeInfo",
        Types.SQL_TIME(): "TimeTypeInfo",
        Types.SQL_TIMESTAMP(): "TimestampTypeInfo",
        Types.PICKLED_BYTE_ARRAY(): "PickledByteArrayTypeInfo",
        Types.TUPLE([s, i]): "TupleTypeInfo(String, Integer)",
        Types.ROW([s, i]): "RowTypeInfo(String, Integer)",
        Types.ROW_NAMED(["name", "n"], [s, i]): "RowTypeInfo(name: String, n: Integer)",
        Types.LIST(s): "ListTypeInfo<String>",
        Types.MAP(s, i): "MapTypeInfo<String, Integer>",
        Types.PRIMITIVE_ARRAY(Types.FLOAT()): "PrimitiveArrayTypeInfo<Float>",
        Types.BASIC_ARRAY(s): "BasicArrayTypeInfo<String>",
        Types.OBJECT_ARRAY(Types.ROW([i])): "ObjectArrayTypeInfo<RowTypeInfo(Integer)>",
    }
    for t, text in cases.items():
        assert repr(t) == text


def test_types_are_values_equal_hashable_and_picklable():
    row = Types.ROW_NAMED(
        ["a", "b"], [Types.LIST(Types.INT()), Types.MAP(Types.STRING(), Types.DOUBLE())]
    )
    same = Types.ROW_NAMED(
        ["a", "b"], [Types.LIST(Types.INT()), Types.MAP(Types.STRING(), Types.DOUBLE())]
    )
    assert row == same and hash(row) == hash(same)
    assert row != Types.ROW_NAMED(["a", "c"], row.field_types)
    assert Types.TUPLE([Types.INT()]) != Types.ROW([Types.INT()])
    assert Types.SQL_DATE() != Types.SQL_TIME()
    assert pickle.loads(pickle.dumps(row)) == row
    assert {Types.INT(), Types.INT(), Types.LONG()} == {Types.INT(), Types.LONG()}
    with pytest.raises(AttributeError):
        row.field_names = ("x", "y")  # type: ignore[misc]


def test_row_type_info_names_its_fields_f0_f1_by_default():
    unnamed = Types.ROW([Types.STRING(), Types.INT()])
    assert isinstance(unnamed, RowTypeInfo)
    assert unnamed.field_names is None
    assert unnamed.names == ("f0", "f1")
    assert unnamed.get_field_names() == ["f0", "f1"]
    named = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    assert named.get_field_names() == ["name", "age"]
    assert named.get_field_index("age") == 1 and named.get_field_index("x") == -1
    assert named.get_field_types() == [Types.STRING(), Types.INT()]
    assert named.field_types == (Types.STRING(), Types.INT())


def test_composite_types_expose_their_parts():
    t = Types.TUPLE([Types.STRING(), Types.INT()])
    assert isinstance(t, TupleTypeInfo)
    assert t.field_types == (Types.STRING(), Types.INT()) == tuple(t.get_field_types())
    lst = Types.LIST(Types.LONG())
    assert isinstance(lst, ListTypeInfo) and lst.element_type == lst.elem_type == Types.LONG()
    m = Types.MAP(Types.STRING(), Types.INT())
    assert isinstance(m, MapTypeInfo) and (m.key_type, m.value_type) == (
        Types.STRING(),
        Types.INT(),
    )
    assert isinstance(Types.BASIC_ARRAY(Types.INT()), BasicArrayTypeInfo)
    assert isinstance(Types.PICKLED_BYTE_ARRAY(), PickledBytesTypeInfo)
    assert Types.INT().basic_type is BasicType.INT


def test_malformed_types_are_refused_when_built():
    with pytest.raises(TypeError, match="list of field types"):
        Types.TUPLE(Types.INT())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="field 1"):
        Types.ROW([Types.INT(), int])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="2 field names"):
        Types.ROW_NAMED(["a", "b"], [Types.INT()])
    with pytest.raises(ValueError, match="unique"):
        Types.ROW_NAMED(["a", "a"], [Types.INT(), Types.INT()])
    with pytest.raises(TypeError, match="list of field names"):
        Types.ROW_NAMED("ab", [Types.INT(), Types.INT()])
    with pytest.raises(ValueError, match="1 to 25"):
        Types.TUPLE([])
    with pytest.raises(TypeError, match="PRIMITIVE_ARRAY takes"):
        Types.PRIMITIVE_ARRAY(Types.STRING())
    with pytest.raises(TypeError, match="BASIC_ARRAY takes"):
        Types.BASIC_ARRAY(Types.LIST(Types.INT()))
    with pytest.raises(TypeError, match="LIST takes a TypeInformation"):
        Types.LIST(str)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MAP's value type"):
        Types.MAP(Types.STRING(), None)  # type: ignore[arg-type]


def test_as_type_info_accepts_types_and_none_and_names_the_argument_otherwise():
    assert as_type_info(None, "map(output_type=...)") is None
    assert as_type_info(Types.INT(), "x") == Types.INT()
    with pytest.raises(TypeError, match=r"map\(output_type=...\) takes a TypeInformation"):
        as_type_info(int, "map(output_type=...)")

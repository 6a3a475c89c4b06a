"""Type-directed printing (tidegate.common.type_format): each record as PyFlink's print() writes
a record of its declared type. The Java strings below were produced by OpenJDK 17
(`Double.toString`, `Float.toString`, `HashMap.toString` of a `new HashMap<>(size)` filled in
the given order, `BigDecimal`, `java.sql.*`, `Instant`); where Java 17 and 19+ differ, Java
19+'s shortest digits are expected (noted)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from tidegate.common import Row, RowKind, Types
from tidegate.common.type_format import (
    RecordTypeError,
    java_double,
    java_float,
    java_string,
    printer,
    to_float32,
)

S, INT, L, D, F = Types.STRING(), Types.INT(), Types.LONG(), Types.DOUBLE(), Types.FLOAT()


@pytest.mark.parametrize(
    ("value", "java"),
    [
        (1.0, "1.0"),
        (0.001, "0.001"),
        (1e-5, "1.0E-5"),
        (1e10, "1.0E10"),
        (1e7, "1.0E7"),
        (9999999.0, "9999999.0"),
        (123.456, "123.456"),
        (-0.0, "-0.0"),
        (0.0, "0.0"),
        (1.5e16, "1.5E16"),
        (0.1, "0.1"),
        (100.0, "100.0"),
        (5e-324, "4.9E-324"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (0.00099, "9.9E-4"),
        (12345678.9, "1.23456789E7"),
        (1e21, "1.0E21"),
        (1e23, "1.0E23"),  # Java 19+; Java 17 prints 9.999999999999999E22
        (2.0e-7, "2.0E-7"),
        (-2.5, "-2.5"),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
    ],
)
def test_doubles_print_as_javas_double_to_string(value, java):
    assert java_double(value) == java


@pytest.mark.parametrize(
    ("value", "java"),
    [
        (0.1, "0.1"),
        (1.0, "1.0"),
        (1e10, "1.0E10"),
        (3.4e38, "3.4E38"),
        (1e-5, "1.0E-5"),
        (0.3, "0.3"),
        (1.401298464324817e-45, "1.4E-45"),
        (16777216.0, "1.6777216E7"),
        (1.1, "1.1"),
        (33.333332, "33.333332"),
        (float("nan"), "NaN"),
    ],
)
def test_floats_print_as_javas_float_to_string(value, java):
    assert java_float(to_float32(value)) == java


BASIC_CASES = [
    (Types.STRING(), "hi", "hi"),
    (Types.STRING(), "", ""),
    (Types.BOOLEAN(), True, "true"),
    (Types.BOOLEAN(), False, "false"),
    (Types.BYTE(), -128, "-128"),
    (Types.SHORT(), 32767, "32767"),
    (Types.INT(), -5, "-5"),
    (Types.LONG(), 2**63 - 1, "9223372036854775807"),
    (Types.DOUBLE(), 1, "1.0"),
    (Types.DOUBLE(), 1e-5, "1.0E-5"),
    (Types.FLOAT(), 0.1, "0.1"),
    (Types.FLOAT(), 2, "2.0"),
    (Types.CHAR(), "x", "x"),
    (Types.BIG_INT(), 2**80, "1208925819614629174706176"),
    (Types.BIG_DEC(), Decimal("0.0000001"), "1E-7"),
    (Types.BIG_DEC(), Decimal("1E+3"), "1E+3"),
    (Types.BIG_DEC(), Decimal("1.50"), "1.50"),
    (Types.BIG_DEC(), Decimal("-0.00"), "0.00"),
    (Types.BIG_DEC(), 7, "7"),
    (Types.SQL_DATE(), dt.date(2020, 1, 2), "2020-01-02"),
    (Types.SQL_TIME(), dt.time(3, 4, 5, 600), "03:04:05"),
    (Types.SQL_TIMESTAMP(), dt.datetime(2020, 1, 2, 3, 4, 5, 120000), "2020-01-02 03:04:05.12"),
    (Types.SQL_TIMESTAMP(), dt.datetime(2020, 1, 2, 3, 4, 5), "2020-01-02 03:04:05.0"),
    (Types.INSTANT(), dt.datetime(2020, 1, 2, 3, 4, 5, 120000, dt.UTC), "2020-01-02T03:04:05.120Z"),
    (Types.INSTANT(), dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "2020-01-02T03:04:05Z"),
    (Types.INSTANT(), dt.datetime(2020, 1, 2, 3, 4, 5, 123), "2020-01-02T03:04:05.000123Z"),
]


@pytest.mark.parametrize(("type_info", "value", "java"), BASIC_CASES)
def test_basic_values_print_as_java_prints_them(type_info, value, java):
    assert printer(type_info)(value) == java
    assert java_string(value, type_info) == java


@pytest.mark.parametrize("type_info", [t for t, _, _ in BASIC_CASES])
def test_none_prints_as_null_for_every_basic_type(type_info):
    assert printer(type_info)(None) == "null"


def test_tuples_print_as_flinks_tuple_to_string():
    t = Types.TUPLE([S, INT, INT, INT])
    assert printer(t)(("hi", 0, 5, 4)) == "(hi,0,5,4)"
    assert printer(t)(["hi", 0, 5, 4]) == "(hi,0,5,4)"  # a list or a Row fits a Tuple too
    assert printer(t)(Row("hi", 0, 5, 4)) == "(hi,0,5,4)"
    mixed = Types.TUPLE([S, Types.BOOLEAN(), D, Types.LIST(S), Types.TUPLE([S, L])])
    assert (
        printer(mixed)((None, True, 2, ["a", None], ("b", 3))) == "(null,true,2.0,[a, null],(b,3))"
    )


def test_rows_inside_other_types_print_as_javas_row_to_string():
    inner = Types.ROW_NAMED(["name", "n"], [S, D])
    t = Types.TUPLE([INT, inner])
    assert printer(t)((1, Row(name="a", n=2))) == "(1,+I[a, 2.0])"
    deleted = Row.of_kind(RowKind.DELETE, "a", 2.5)
    assert printer(t)((1, deleted)) == "(1,-D[a, 2.5])"
    assert printer(Types.LIST(Types.ROW([S, INT])))([("x", 1), ["y", 2]]) == "[+I[x, 1], +I[y, 2]]"
    assert printer(t)((1, {"name": "d", "n": 1.5})) == "(1,+I[d, 1.5])"


def test_lists_arrays_and_maps_print_as_java_collections():
    assert printer(Types.LIST(S))(["a", "b"]) == "[a, b]"
    assert printer(Types.LIST(S))([]) == "[]"
    assert printer(Types.PRIMITIVE_ARRAY(D))([1, 2.5]) == "[1.0, 2.5]"
    assert printer(Types.PRIMITIVE_ARRAY(Types.BYTE()))(b"\x01\xff") == "[1, -1]"
    assert printer(Types.BASIC_ARRAY(INT))([1, None]) == "[1, null]"
    assert printer(Types.OBJECT_ARRAY(Types.TUPLE([S, INT])))([("a", 1)]) == "[(a,1)]"
    assert printer(Types.MAP(S, Types.LIST(INT)))({"k": [1, None]}) == "{k=[1, null]}"
    assert printer(Types.MAP(S, INT))({}) == "{}"
    assert printer(Types.MAP(S, INT))({"k": None}) == "{k=null}"


def _ordered(keys):
    return {k: i for i, k in enumerate(keys)}


@pytest.mark.parametrize(
    ("key_type", "keys", "java"),
    [
        (S, ["banana", "apple", "cherry"], "{banana=0, apple=1, cherry=2}"),
        (
            S,
            ["hi", "hello", "a", "b", "zebra", "Aa", "BB", "flink", "pyflink", "z"],
            "{zebra=4, Aa=5, BB=6, flink=7, hi=0, a=2, b=3, pyflink=8, z=9, hello=1}",
        ),
        (
            S,
            [f"k{j * 7}" for j in range(20)],
            "{k91=13, k0=0, k70=10, k84=12, k42=6, k63=9, k77=11, k21=3, k98=14, k7=1, k35=5, "
            "k56=8, k14=2, k28=4, k49=7, k112=16, k133=19, k105=15, k126=18, k119=17}",
        ),
        (INT, [100, 3, 17, -1, 64, 2], "{-1=3, 64=4, 17=2, 2=5, 3=1, 100=0}"),
        (L, [5000000000, 3, -7, 1], "{1=3, 3=1, 5000000000=0, -7=2}"),
        (D, [1.5, -0.0, 2.0, 1e10], "{1.5=0, -0.0=1, 2.0=2, 1.0E10=3}"),
        (Types.BOOLEAN(), [True, False], "{false=1, true=0}"),
        (S, ["x"], "{x=0}"),
    ],
)
def test_maps_iterate_in_the_order_of_the_java_hash_map_flink_builds(key_type, keys, java):
    assert printer(Types.MAP(key_type, INT))(_ordered(keys)) == java


def test_a_row_typed_stream_prints_as_pyflink_formats_it_in_python():
    # PyFlink maps a Row-typed stream through "{kind}[{','.join(str(field))}]" before printing
    t = Types.ROW([S, INT, INT, INT])
    assert printer(t)(Row("hi", 0, 5, 4)) == "+I[hi,0,5,4]"
    assert printer(t)(("hi", 0, 5, 4)) == "+I[hi,0,5,4]"  # a tuple becomes an insert row
    assert printer(t)(Row.of_kind(RowKind.UPDATE_BEFORE, "hi", 0, 5, 4)) == "-U[hi,0,5,4]"
    # the fields went through the declared types: a DOUBLE holds a float, a FLOAT 32 bits
    typed = Types.ROW([D, F, Types.BOOLEAN(), S])
    assert printer(typed)((1, 0.1, True, None)) == "+I[1.0,0.10000000149011612,True,None]"
    nested = Types.ROW(
        [Types.TUPLE([S, INT]), Types.ROW([INT, S]), Types.LIST(S), Types.MAP(S, INT)]
    )
    assert (
        printer(nested)((("a", 1), (2, "b"), ["c"], {"d": 3}))
        == "+I[('a', 1),Row(f0=2, f1='b'),['c'],{'d': 3}]"
    )


def test_a_named_row_is_read_by_field_name_as_pyflink_does():
    t = Types.ROW_NAMED(["name", "age"], [S, INT])
    assert printer(t)(Row(age=3, name="a")) == "+I[a,3]"
    assert printer(t)({"name": "b", "age": 4}) == "+I[b,4]"
    assert printer(t)(Row("c", 5)) == "+I[c,5]"
    with pytest.raises(RecordTypeError, match=r"no field 'name'.*ROW_NAMED"):
        printer(t)(Row(nom="a", age=3))
    with pytest.raises(RecordTypeError, match="no field 'f0'"):
        printer(Types.ROW([S, INT]))(Row(name="a", age=3))


def test_an_undeclared_type_prints_str_of_the_record():
    for t in (None, Types.PICKLED_BYTE_ARRAY()):
        p = printer(t)
        assert p(("hi", 0)) == "('hi', 0)"
        assert p("text") == "text"
        assert p(Row(name="a")) == "Row(name='a')"
        assert p(None) == "None"
        assert p(1.0) == "1.0"


@pytest.mark.parametrize(
    ("type_info", "value", "message"),
    [
        (INT, "x", r"'x' \(str\) does not match Integer: expected an int"),
        (INT, 2**31, r"out of range \[-2147483648, 2147483647\]"),
        (INT, 1.5, "expected an int"),
        (Types.BYTE(), 128, "out of range"),
        (S, 5, "expected a str"),
        (Types.BOOLEAN(), 1, "expected a bool"),
        (D, "1.0", "expected a float or an int"),
        (F, 1e39, "too large for a 32-bit float"),
        (Types.CHAR(), "ab", "one character"),
        (Types.BIG_DEC(), Decimal("NaN"), "finite"),
        (Types.SQL_DATE(), "2020-01-01", "datetime.date"),
        (Types.TUPLE([S, INT]), ("a", "b"), r"field 1: 'b' \(str\) does not match Integer"),
        (Types.TUPLE([S, INT]), ("a", 1, 2), "expected 2 fields, got 3"),
        (Types.TUPLE([S, INT]), "ab", "expected a tuple, list or Row of 2 fields"),
        (Types.ROW([S, INT]), ("a",), "expected 2 fields, got 1"),
        (Types.ROW_NAMED(["n", "v"], [S, INT]), ("a", "b"), "field 'v': 'b'"),
        (Types.ROW([S]), None, "cannot hold None"),
        (Types.LIST(INT), [1, "x"], "element 1: 'x'"),
        (Types.LIST(INT), "12", "expected a list"),
        (Types.PRIMITIVE_ARRAY(INT), [1, None], "element 1: None.*cannot be null"),
        (Types.MAP(S, INT), {1: 1}, "a key: 1 .int. does not match String"),
        (Types.MAP(S, INT), {"k": "v"}, "the value of 'k': 'v'"),
        (Types.MAP(S, INT), [("k", 1)], "expected a dict"),
        (Types.TUPLE([Types.TUPLE([INT])]), ((None,), ("x",)), "expected 1 fields, got 2"),
        (Types.TUPLE([Types.LIST(Types.TUPLE([INT]))]), ([(1,), ("x",)],), r"field 0: element 1"),
    ],
)
def test_a_value_that_does_not_fit_its_type_is_a_clear_error(type_info, value, message):
    with pytest.raises(RecordTypeError, match=message):
        printer(type_info)(value)


def test_record_type_error_is_a_type_error():
    assert issubclass(RecordTypeError, TypeError)

"""Typed batch codecs (common/record_codec.py): a batch of a declared type, converted inside a
slot or encoded and decoded between processes, comes out exactly as `converter(type)` makes
each record — the same values, Python types, row names and kinds — or fails with the
converter's RecordTypeError; the fast (msgspec) and exact ways agree."""

from __future__ import annotations

import datetime as dt
import pickle
from decimal import Decimal

import pytest

from tidegate.common.record_codec import batch_codec
from tidegate.common.type_format import RecordTypeError, converter
from tidegate.common.typeinfo import Types
from tidegate.common.types import Row, RowKind
from tidegate.runtime.events import CheckpointBarrier
from tidegate.runtime.frames import TypedEdge, decode_frame, encode_frame, encode_typed_frame
from tidegate.runtime.gate import InputGate
from tidegate.runtime.network import LocalTransport, RecordWriter
from tidegate.runtime.records import TimestampedBatch, timestamps_of

PERSON = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])

# (declared type, a batch that fits it)
FITTING = [
    (Types.LONG(), [1, -(2**63), 2**63 - 1, None, True]),
    (Types.INT(), [0, -(2**31), 2**31 - 1]),
    (Types.SHORT(), [-(2**15), 2**15 - 1]),
    (Types.BYTE(), [-128, 127, None]),
    (Types.DOUBLE(), [1.5, 2, None, float("inf")]),
    (Types.FLOAT(), [0.1, 3, -2.5e38]),
    (Types.BOOLEAN(), [True, False, None]),
    (Types.STRING(), ["a", "", "naïve ✓", "with\0nul", None, "\udc80 lone surrogate"]),
    (Types.STRING(), []),
    (Types.CHAR(), ["a", "b"]),
    (Types.BIG_INT(), [2**100, -1]),
    (Types.BIG_DEC(), [Decimal("1.25"), 3]),
    (Types.SQL_DATE(), [dt.date(2024, 2, 29), dt.datetime(2024, 1, 1, 5)]),
    (Types.LIST(Types.INT()), [[1, 2], (3,), None]),
    (Types.MAP(Types.STRING(), Types.LONG()), [{"a": 1}, {}]),
    (Types.PRIMITIVE_ARRAY(Types.BYTE()), [b"\x00\xff", [1, -2]]),
    (Types.TUPLE([Types.STRING(), Types.LONG()]), [("a", 1), ["b", 2], Row("c", 3), None]),
    (
        Types.TUPLE([Types.INT(), Types.DOUBLE(), Types.BOOLEAN()]),
        [(1, 2, True), (None, None, None)],
    ),
    (
        Types.TUPLE([Types.STRING(), Types.TUPLE([Types.INT(), Types.LIST(Types.STRING())])]),
        [("a", (1, ["x", None])), ("b", None)],
    ),
    (PERSON, [Row("ann", 1), Row(name="bob", age=2), Row(age=3, name="cy"), ("dan", 4)]),
    (PERSON, [{"name": "eve", "age": 5}, ["fay", None], Row.of_kind(RowKind.DELETE, "gus", 6)]),
    (PERSON, [Row(name="hal", age=7, extra="ignored")]),
    (Types.ROW([Types.STRING(), Types.DOUBLE()]), [Row("a", 1), ("b", 2.5)]),
    (
        Types.ROW([PERSON, Types.TUPLE([Types.BOOLEAN()])]),
        [Row(Row("ann", 1), (True,)), Row(None, None)],
    ),
]

# (declared type, a batch whose second record does not fit)
MISFITTING = [
    (Types.LONG(), [1, 2**63]),
    (Types.INT(), [1, 2**31]),
    (Types.LONG(), [1, "2"]),
    (Types.LONG(), [1, 2.0]),
    (Types.DOUBLE(), [1.0, True]),
    (Types.DOUBLE(), [1.0, "x"]),
    (Types.FLOAT(), [1.0, 1e39]),
    (Types.BOOLEAN(), [True, 1]),
    (Types.STRING(), ["a", b"b"]),
    (Types.CHAR(), ["a", "bc"]),
    (Types.TUPLE([Types.STRING(), Types.LONG()]), [("a", 1), ("b", 1, 2)]),
    (Types.TUPLE([Types.STRING(), Types.STRING()]), [("a", "b"), "cd"]),
    (Types.TUPLE([Types.STRING(), Types.STRING()]), [("a", "b"), {"x": 1, "y": 2}]),
    (Types.TUPLE([Types.STRING(), Types.LONG()]), [("a", 1), ("b", "x")]),
    (PERSON, [Row("a", 1), Row(name="b", years=2)]),
    (PERSON, [Row("a", 1), Row("b", 2**40)]),
    (PERSON, [Row("a", 1), 5]),
    (Types.LIST(Types.INT()), [[1], ["x"]]),
]


def _typed(values):
    """Values with their Python types (1 == 1.0 == True, but a codec must keep them apart)."""
    if isinstance(values, Row):
        return ("Row", values._fields, str(values.get_row_kind()), _typed(values._values))
    if isinstance(values, list | tuple):
        return (type(values).__name__, [_typed(v) for v in values])
    if isinstance(values, dict):
        return {k: _typed(v) for k, v in values.items()}
    return (type(values).__name__, repr(values))


@pytest.mark.parametrize("type_info,batch", FITTING, ids=lambda x: repr(x)[:40])
def test_a_batch_comes_out_as_the_converter_makes_each_record(type_info, batch):
    codec = batch_codec(type_info)
    expected = _typed([converter(type_info)(record) for record in batch])
    assert _typed(codec.convert(batch)) == expected
    assert _typed(codec.decode(codec.encode(batch), len(batch))) == expected


@pytest.mark.parametrize("type_info,batch", MISFITTING, ids=lambda x: repr(x)[:40])
def test_a_record_that_does_not_fit_is_the_converters_error_naming_the_record(type_info, batch):
    codec = batch_codec(type_info)
    with pytest.raises(RecordTypeError) as expected:
        converter(type_info)(batch[1])
    with pytest.raises(RecordTypeError) as error:
        codec.convert(batch)
    assert str(error.value) == f"record {batch[1]!r}: {expected.value}"
    # between processes the receiver finds it (in the form the frame carried it)
    with pytest.raises(RecordTypeError, match="does not match"):
        codec.decode(codec.encode(batch), len(batch))


def test_common_shapes_take_the_fast_way_and_odd_ones_the_exact_way():
    pairs = batch_codec(Types.TUPLE([Types.STRING(), Types.LONG()]))
    assert pairs.encode([("a", 1)])[0] == 0  # MessagePack
    assert pairs.encode([("a", 1), Row("b", 2)])[0] == 1  # a Row among tuples: the converter
    assert batch_codec(PERSON).encode([Row("a", 1), Row(name="b", age=2)])[0] == 0
    assert batch_codec(PERSON).encode([Row(age=2, name="b")])[0] == 1  # read by name
    assert batch_codec(Types.FLOAT()).encode([1.5])[0] == 1  # 32-bit rounding
    assert batch_codec(Types.STRING()).encode(["\udc80"])[0] == 1  # not UTF-8


def test_rows_are_named_by_the_declared_type_and_keep_their_kind():
    rows = batch_codec(PERSON).convert([Row("ann", 1), Row.of_kind(RowKind.UPDATE_AFTER, "b", 2)])
    assert [(r.name, r.age, r["age"], r[0]) for r in rows] == [
        ("ann", 1, 1, "ann"),
        ("b", 2, 2, "b"),
    ]
    assert [r.get_row_kind() for r in rows] == [RowKind.INSERT, RowKind.UPDATE_AFTER]
    assert rows[0].as_dict() == {"name": "ann", "age": 1}
    unnamed = batch_codec(Types.ROW([Types.LONG()])).convert([Row(7)])
    assert unnamed == [converter(Types.ROW([Types.LONG()]))(Row(7))] and unnamed[0].f0 == 7


def test_no_codec_for_undeclared_streams():
    assert batch_codec(None) is None
    assert batch_codec(Types.PICKLED_BYTE_ARRAY()) is None


def test_typed_frames_round_trip_with_timestamps_and_pickled_frames_still_decode():
    edge = TypedEdge(7, batch_codec(Types.TUPLE([Types.STRING(), Types.LONG()])), "operator 'P'")
    batch = TimestampedBatch([("a", 1), ("b", 2)], [10, 20])
    (channel, decoded), pickled = decode_frame(encode_typed_frame(3, edge, batch), {7: edge})
    assert (channel, decoded, timestamps_of(decoded), pickled) == (3, batch, [10, 20], False)
    (channel, decoded), pickled = decode_frame(encode_typed_frame(0, edge, []), {7: edge})
    assert (channel, decoded, timestamps_of(decoded), pickled) == (0, [], None, False)
    with pytest.raises(RecordTypeError, match=r"operator 'P' emitted .*'x' \(str\) does not"):
        decode_frame(encode_typed_frame(0, edge, [("a", "x")]), {7: edge})
    data, _ = encode_frame((2, ["any", object.__name__]))
    assert decode_frame(data, {}) == ((2, ["any", "object"]), True)


def test_a_gate_records_a_typed_frame_as_a_pickle_for_channel_state():
    edge = TypedEdge(1, batch_codec(PERSON), "operator 'P'")
    gate = InputGate(10)
    gate.start_capture(1, [0])
    frame, pickled = decode_frame(encode_typed_frame(0, edge, [Row("a", 1)]), {1: edge})
    assert not pickled
    gate.put_data(frame, None)  # what the slot's reader passes for a typed frame
    gate.put_data((0, CheckpointBarrier(1, 0)))
    (blob,) = gate.take_capture(1)
    assert pickle.loads(blob) == (0, [Row(name="a", age=1)])


def test_a_local_typed_edge_converts_as_a_remote_one_and_names_the_operator_on_a_misfit():
    gate = InputGate(10)
    typed = TypedEdge(1, batch_codec(PERSON), "operator 'Parse' (Source -> Parse)")
    writer = RecordWriter(
        [(LocalTransport(gate), 0)], lambda recs, bufs: bufs[0].extend(recs), 1, None, typed
    )
    writer.process_batch([Row("ann", 1)])
    _control, (_channel, batch) = gate.get(0)
    assert batch[0].name == "ann" and batch[0]._fields == ["name", "age"]
    with pytest.raises(RecordTypeError) as error:
        writer.process_batch([("bob", "old")])
    assert str(error.value).startswith(
        "operator 'Parse' (Source -> Parse) emitted a record that does not fit its declared "
        "output type RowTypeInfo(name: String, age: Integer): record ('bob', 'old'): "
        "field 'age': 'old' (str) does not match Integer"
    )

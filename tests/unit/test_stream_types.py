"""Every DataStream knows its declared type (`get_type()`, PyFlink's PICKLED_BYTE_ARRAY when
none was declared), and print() hands it to the print sink, whose writer formats each record
by it and names the declaring operator when a record does not fit. No job runs here."""

from __future__ import annotations

import pytest

from tidegate.common import Duration, Row, Types, WatermarkStrategy
from tidegate.common.type_format import RecordTypeError
from tidegate.connectors.print_sink import PrintSink, PrintSinkWriter
from tidegate.datastream import (
    CoMapFunction,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.window import CountTumblingWindowAssigner

PAIR = Types.TUPLE([Types.STRING(), Types.INT()])
PICKLED = Types.PICKLED_BYTE_ARRAY()


class Emit(ProcessFunction):
    def process_element(self, value, ctx):
        yield value


class Both(CoMapFunction):
    def map1(self, value):
        return value

    def map2(self, value):
        return value


class Apply:
    def apply(self, key, window, inputs):
        return [(key, len(list(inputs)))]


def _source():
    env = StreamExecutionEnvironment.get_execution_environment()
    return env, env.from_collection([("a", 1)], type_info=PAIR)


def _print_sink(stream) -> PrintSink:
    stream.print()
    t = stream._env._stream_graph.transformations[-1]
    return t.connector


def test_streams_without_a_declared_type_are_pickled_byte_arrays():
    env, _ = _source()
    plain = env.from_collection([1, 2])
    assert plain.get_type() == PICKLED
    assert plain.map(lambda v: v).get_type() == PICKLED
    assert plain.flat_map(lambda v: [v]).get_type() == PICKLED


def test_operators_declare_their_output_type_and_pass_the_input_type_through():
    _env, pairs = _source()
    assert pairs.get_type() == PAIR
    assert pairs.map(lambda v: v[1], output_type=Types.INT()).get_type() == Types.INT()
    assert pairs.flat_map(lambda v: [v[0]], Types.STRING()).get_type() == Types.STRING()
    assert pairs.process(Emit(), PAIR).get_type() == PAIR
    assert pairs.filter(lambda v: True).get_type() == PAIR
    keyed = pairs.key_by(lambda v: v[0], key_type=Types.STRING())
    assert keyed.get_type() == PAIR
    assert keyed.reduce(lambda a, b: a).get_type() == PAIR
    assert keyed.map(lambda v: v).get_type() == PICKLED
    assert pairs.rebalance().get_type() == PAIR
    assert pairs.union(pairs.map(lambda v: v, PAIR)).get_type() == PAIR
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(1))
    timed = pairs.assign_timestamps_and_watermarks(
        strategy.with_timestamp_assigner(lambda v, ts: v[1])
    )
    assert timed.get_type() == PAIR


def test_windows_connected_streams_and_side_outputs_carry_types():
    _env, pairs = _source()
    windowed = pairs.key_by(lambda v: v[0]).window(CountTumblingWindowAssigner.of(2))
    assert windowed.reduce(lambda a, b: a).get_type() == PAIR  # reduce: the input's type
    counted = pairs.key_by(lambda v: v[0]).count_window(2)
    assert counted.apply(Apply(), PAIR).get_type() == PAIR
    assert counted.apply(Apply()).get_type() == PICKLED
    assert pairs.connect(pairs).map(Both(), Types.STRING()).get_type() == Types.STRING()
    tag = OutputTag("late", Types.LONG())
    processed = pairs.process(Emit(), PAIR)
    assert processed.get_side_output(tag).get_type() == Types.LONG()
    assert processed.get_side_output(OutputTag("other")).get_type() == PICKLED


def test_a_type_argument_that_is_no_type_information_is_refused():
    env, pairs = _source()
    with pytest.raises(TypeError, match=r"map\(output_type=...\) takes a TypeInformation"):
        pairs.map(lambda v: v, output_type=tuple)
    with pytest.raises(TypeError, match=r"from_collection\(type_info=...\)"):
        env.from_collection([1], type_info="INT")


def test_print_hands_the_declared_type_and_the_declaring_operator_to_the_sink():
    _env, pairs = _source()
    sink = _print_sink(pairs.map(lambda v: v, PAIR).name("Pairs"))
    assert (sink.type_info, sink.declared_by) == (PAIR, "Pairs")
    untyped = _print_sink(pairs.map(str))
    assert untyped.type_info is None


def test_print_refuses_a_union_of_different_declared_types():
    _env, pairs = _source()
    with pytest.raises(ValueError, match="different declared types"):
        pairs.union(pairs.map(lambda v: v[0], Types.STRING())).print()


def test_the_print_writer_formats_by_type_and_names_the_operator_on_a_mismatch(capsys):
    rows = Types.ROW_NAMED(["word", "n"], [Types.STRING(), Types.INT()])
    writer = PrintSink("id", type_info=rows, declared_by="Count").create_writer(1, 2, 0)
    writer.write_batch([Row(word="hi", n=2), ("ho", 3)])
    assert capsys.readouterr().out == "id:2> +I[hi,2]\nid:2> +I[ho,3]\n"
    with pytest.raises(RecordTypeError) as failure:
        writer.write_batch([("ok", 1), ("bad", "x")])
    message = str(failure.value)
    assert "'Count'" in message and "RowTypeInfo(word: String, n: Integer)" in message
    assert "field 'n': 'x' (str) does not match Integer" in message
    assert "('bad', 'x')" in message
    assert capsys.readouterr().out == ""  # nothing of a failing batch is printed
    plain = PrintSinkWriter("", False)
    plain.write_batch([("hi", 1), None])
    assert capsys.readouterr().out == "('hi', 1)\nNone\n"


def _elements(stream) -> tuple:
    return stream._transformation.connector.elements


def test_from_collection_converts_the_elements_to_the_declared_type_as_pyflink_does():
    env = StreamExecutionEnvironment.get_execution_environment()
    people = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    rows = _elements(env.from_collection([("alice", 11), Row(age=12, name="bob")], people))
    assert rows == (Row(name="alice", age=11), Row(name="bob", age=12))
    assert rows[0].name == "alice" and rows[1][1] == 12
    assert _elements(env.from_collection([["a", 1]], PAIR)) == (("a", 1),)
    assert _elements(env.from_collection([1, 2], Types.DOUBLE())) == (1.0, 2.0)
    assert _elements(env.from_collection([[1], (2,)])) == ([1], (2,))  # undeclared: as given
    with pytest.raises(RecordTypeError, match=r"element 1 .*field 1: 'x'"):
        env.from_collection([("a", 1), ("b", "x")], PAIR)

"""DeserializeOrDeadLetter: readable messages become records, unreadable ones DeadLetters on
the side output (the job itself runs in tests/e2e/test_formats.py)."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from tidegate.common import Row, Types
from tidegate.common.serialization import DeserializationSchema
from tidegate.datastream import OutputTag
from tidegate.datastream.formats.csv import CsvRowDeserializationSchema
from tidegate.datastream.formats.dead_letters import DeadLetter, DeserializeOrDeadLetter
from tidegate.datastream.formats.json import JsonRowDeserializationSchema

POINT = Types.ROW_NAMED(["x", "y"], [Types.INT(), Types.INT()])
DEAD = OutputTag("dead-letters")


class Context:
    def __init__(self) -> None:
        self.side: list[tuple[OutputTag, object]] = []

    def output(self, tag: OutputTag, value: object) -> None:
        self.side.append((tag, value))


def run(function: DeserializeOrDeadLetter, messages: list) -> tuple[list, list]:
    ctx, out = Context(), []
    for message in messages:
        out.extend(function.process_element(message, ctx) or ())
    return out, ctx.side


def test_readable_messages_pass_and_unreadable_ones_become_dead_letters():
    schema = JsonRowDeserializationSchema.builder().type_info(POINT).build()
    out, side = run(
        DeserializeOrDeadLetter(schema, DEAD), [b'{"x":1,"y":2}', b'{"x":"a"}', b"{oops"]
    )
    assert out == [Row(x=1, y=2)]
    assert [tag for tag, _ in side] == [DEAD, DEAD]
    wrong_type, not_json = (letter for _, letter in side)
    assert wrong_type.record == b'{"x":"a"}' and wrong_type.field == "x"
    assert "expected an integer" in wrong_type.error
    assert not_json.position == "char 1" and "not valid JSON" in not_json.error
    assert not_json.error_type == "FormatError" and "Traceback" in not_json.traceback


def test_messages_the_schema_skips_emit_nothing():
    schema = CsvRowDeserializationSchema.Builder(POINT).set_allow_comments(True).build()
    out, side = run(DeserializeOrDeadLetter(schema, DEAD), ["# comment", "", "1,2", "1"])
    assert out == [Row(x=1, y=2)]
    assert [letter.record for _, letter in side] == ["1"]


def test_other_errors_of_a_user_schema_still_fail():
    class Broken(DeserializationSchema):
        def deserialize(self, message):
            raise RuntimeError("bug")

    with pytest.raises(RuntimeError, match="bug"):
        run(DeserializeOrDeadLetter(Broken(), DEAD), [b"x"])


def test_the_function_and_its_dead_letters_pickle():
    schema = JsonRowDeserializationSchema.builder().type_info(POINT).build()
    function = pickle.loads(cloudpickle.dumps(DeserializeOrDeadLetter(schema, DEAD)))
    assert function.schema == schema and function.dead_letter_tag == DEAD
    letter = DeadLetter(b"x", "JSON: bad", "FormatError", field="f", position="char 0")
    assert pickle.loads(pickle.dumps(letter)) == letter


def test_it_needs_a_schema_and_an_output_tag():
    schema = JsonRowDeserializationSchema.builder().type_info(POINT).build()
    with pytest.raises(TypeError, match="OutputTag"):
        DeserializeOrDeadLetter(schema, "dead")
    with pytest.raises(TypeError, match="deserialization schema"):
        DeserializeOrDeadLetter(POINT, DEAD)

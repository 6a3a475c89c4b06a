"""The dead-letter policy (runtime/dead_letters.py): an operator whose DEAD_LETTERS side output
is read routes the records its function raises on there, drops what they emitted, keeps every
other record's output in order, in one batch and with its timestamp; without a reader the
exception fails the task; errors that say nothing about a record fail it under the policy too.
(The job on Spark, under a kill and an exception: tests/e2e/test_poison_records.py.)"""

from __future__ import annotations

import pytest

from tidegate.common import Types
from tidegate.common.time import Time
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.dead_letters import DEAD_LETTERS, DeadLetter
from tidegate.datastream.formats.json import JsonRowDeserializationSchema
from tidegate.datastream.output_tag import OutputTag
from tidegate.datastream.window import TumblingEventTimeWindows
from tidegate.runtime.faults import InjectedFault
from tidegate.runtime.operators import (
    FilterOperator,
    FlatMapOperator,
    KeyedReduceOperator,
    MapOperator,
    OperatorRuntime,
    ProcessOperator,
    SideOutputOperator,
)
from tidegate.runtime.records import TimestampedBatch, timestamps_of

OTHER = OutputTag("other")


class Collect:
    def __init__(self) -> None:
        self.records: list = []
        self.timestamps: list = []
        self.batches = 0

    def process_batch(self, records: list) -> None:
        self.batches += 1
        self.records.extend(records)
        self.timestamps.extend(timestamps_of(records) or [None] * len(records))


def opened(op, *, dead_letters: bool = True):
    """`op` initialized and opened with a regular output, a side output `other` and (if
    `dead_letters`) a reader of its dead letters; returns (out, dead, other)."""
    op.initialize_state(OperatorRuntime(0, 1, 128, 0), None)
    out, dead, other = Collect(), Collect(), Collect()
    readers = [SideOutputOperator(OTHER.tag_id)]
    readers[0].outputs = [other]
    if dead_letters:
        readers.append(SideOutputOperator(DEAD_LETTERS.tag_id))
        readers[-1].outputs = [dead]
    op.outputs = [out, *readers]
    op.open()
    return out, dead, other


def parse(value: str) -> int:
    return int(value)


def test_a_map_routes_the_records_it_raises_on_and_keeps_the_others_in_order():
    op = MapOperator(None, parse, uid="parse", name="Parse")
    out, dead, _ = opened(op)
    op.process_batch(["1", "x", "3", "", "5"])
    assert out.records == [1, 3, 5] and out.batches == 1  # one batch, as without the policy
    assert [d.record for d in dead.records] == ["x", ""]
    letter = dead.records[0]
    assert isinstance(letter, DeadLetter)
    assert (letter.operator, letter.error_type) == ("Parse", "ValueError")
    assert letter.error == "invalid literal for int() with base 10: 'x'"
    assert "in parse" in letter.traceback and letter.traceback.rstrip().endswith(letter.error)
    assert letter.field is None and letter.position is None


def test_a_format_error_names_its_field_and_position():
    schema = (
        JsonRowDeserializationSchema.builder()
        .type_info(Types.ROW_NAMED(["x"], [Types.INT()]))
        .build()
    )
    op = MapOperator(None, schema.deserialize, uid="json", name="JSON")
    out, dead, _ = opened(op)
    op.process_batch([b'{"x": 1}', b'{"x": "a"}'])
    assert len(out.records) == 1
    (letter,) = dead.records
    assert (letter.record, letter.error_type, letter.field) == (b'{"x": "a"}', "FormatError", "x")


def test_timestamps_stay_with_their_records_and_their_dead_letters():
    op = MapOperator(None, parse, uid="parse", name="Parse")
    out, dead, _ = opened(op)
    op.process_batch(TimestampedBatch(["1", "x", "3"], [10, 20, 30]))
    assert list(zip(out.records, out.timestamps, strict=True)) == [(1, 10), (3, 30)]
    assert [(d.record, t) for d, t in zip(dead.records, dead.timestamps, strict=True)] == [
        ("x", 20)
    ]


def test_what_a_failing_record_emitted_before_raising_is_dropped():
    def explode(value):
        yield value
        yield value * 10
        if value == 2:
            raise KeyError(value)

    op = FlatMapOperator(None, explode, uid="f", name="Explode")
    out, dead, _ = opened(op)
    op.process_batch([1, 2, 3])
    assert out.records == [1, 10, 3, 30]
    assert [(d.record, d.error_type) for d in dead.records] == [(2, "KeyError")]


def test_a_filter_and_a_process_function_route_too_and_a_failing_records_side_outputs_go():
    op = FilterOperator(None, lambda v: 10 // v > 2, uid="f", name="Filter")
    out, dead, _ = opened(op)
    op.process_batch([1, 0, 5, 2])
    assert out.records == [1, 2]
    assert [(d.record, d.error_type) for d in dead.records] == [(0, "ZeroDivisionError")]

    def process_element(value, ctx):
        ctx.output(OTHER, ("side", value))
        yield OTHER, ("yielded side", value)
        if value < 0:
            raise ValueError("negative")
        yield value

    op = ProcessOperator(None, process_element, uid="p", name="Process")
    out, dead, other = opened(op)
    op.process_batch([1, -1, 2])
    assert out.records == [1, 2]
    assert sorted(other.records) == [
        ("side", 1),
        ("side", 2),
        ("yielded side", 1),
        ("yielded side", 2),
    ]
    assert [d.record for d in dead.records] == [-1]


def test_a_keyed_reduce_leaves_a_failing_records_key_as_it_was():
    def add(a, b):
        if b[1] is None:
            raise TypeError("no amount")
        return (a[0], a[1] + b[1])

    op = KeyedReduceOperator(None, add, lambda r: r[0], uid="r", name="Sum")
    out, dead, _ = opened(op)
    op.process_batch([("a", 1), ("a", None), ("a", 2), ("b", 5)])
    assert out.records == [("a", 1), ("a", 3), ("b", 5)]
    assert [d.record for d in dead.records] == [("a", None)]


def test_without_a_reader_of_dead_letters_the_exception_fails_the_task():
    op = MapOperator(None, parse, uid="parse", name="Parse")
    opened(op, dead_letters=False)
    with pytest.raises(ValueError, match="invalid literal"):
        op.process_batch(["1", "x"])


@pytest.mark.parametrize("error", [MemoryError, RecursionError, InjectedFault])
def test_errors_that_say_nothing_about_the_record_fail_the_task_under_the_policy_too(error):
    # InjectedFault: a chaos run's exception stands for a failure of the task, not a bad record
    def failing(value):
        raise error("chaos" if error is InjectedFault else None)

    op = MapOperator(None, failing, uid="m", name="Map")
    _, dead, _ = opened(op)
    with pytest.raises(error):
        op.process_batch([1])
    assert dead.records == []


def test_only_operators_that_run_a_function_per_record_offer_dead_letters():
    env = StreamExecutionEnvironment.get_execution_environment()
    source = env.from_collection([1, 2, 3])
    source.map(parse).get_side_output(DEAD_LETTERS)  # fine
    windowed = source.key_by(lambda v: v).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
    with pytest.raises(TypeError, match=r"cannot route records to dead letters.*map, flat_map"):
        windowed.reduce(lambda a, b: a + b).get_side_output(DEAD_LETTERS)

"""PyFlink-style programs, written here in the spirit of PyFlink's own examples with only the
imports changed, print on the driver's stdout what PyFlink prints for them, on both runners at
parallelism 1 and 2: a BATCH word count with `Types.TUPLE` records, JSON processing, and state
access with a TTL. (Windows, rows and timers: test_typed_print.py, test_windows.py,
test_pyflink_examples.py.) Lines of parallel subtasks may interleave, so each sink's payloads
are compared as multisets, and each line's `N> ` prefix must name a subtask."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

import cloudpickle
import pytest

from tests.support.environments import job_environment
from tidegate.common import Time, Types
from tidegate.datastream import (
    KeyedProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from tidegate.datastream.state import StateTtlConfig, ValueStateDescriptor

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TEXT = [
    "To be, or not to be,--that is the question:--",
    "Whether 'tis nobler in the mind to suffer",
    "The slings and arrows of outrageous fortune",
    "Or to take arms against a sea of troubles,",
]


def _env(runner: str, tmp_path, parallelism: int) -> StreamExecutionEnvironment:
    return job_environment(
        runner, tmp_path / "chk", parallelism=parallelism, interval_ms=None, restarts=None
    )


def _payloads(out: str, parallelism: int) -> Counter:
    prefix = r"[12]> " if parallelism > 1 else ""
    payloads = Counter()
    for line in out.splitlines():
        m = re.fullmatch(prefix + r"(?P<payload>.*)", line)
        assert m, f"an unexpected line {line!r}"
        payloads[m["payload"]] += 1
    return payloads


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_batch_word_count_prints_each_words_final_tuple(runner, tmp_path, capsys, parallelism):
    env = _env(runner, tmp_path, parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)

    def split(line):
        yield from line.split()

    (
        env.from_collection(TEXT)
        .flat_map(split)
        .map(lambda word: (word, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .print()
    )
    env.execute("word count")
    counts = Counter(word for line in TEXT for word in line.split())
    assert _payloads(capsys.readouterr().out, parallelism) == Counter(
        f"({word},{n})" for word, n in counts.items()
    )


@pytest.mark.parametrize("parallelism", [1, 2])
def test_json_records_are_parsed_changed_and_printed_as_tuples(
    runner, tmp_path, capsys, parallelism
):
    env = _env(runner, tmp_path, parallelism)
    people = [
        (1, '{"name": "Flink", "tel": 123, "addr": {"country": "Germany", "city": "Berlin"}}'),
        (2, '{"name": "hello", "tel": 135, "addr": {"country": "China", "city": "Shanghai"}}'),
        (3, '{"name": "world", "tel": 124, "addr": {"country": "USA", "city": "NewYork"}}'),
    ]
    row_type = Types.TUPLE([Types.INT(), Types.STRING()])

    def move_to_the_capital(record):
        number, text = record
        person = json.loads(text)
        person["addr"]["country"] = "China"
        person["addr"]["city"] = "Beijing"
        return number, json.dumps(person)

    (
        env.from_collection(people, type_info=row_type)
        .map(move_to_the_capital, output_type=row_type)
        .print()
    )
    env.execute("json")
    expected = Counter()
    for number, text in people:
        person = json.loads(text)
        person["addr"] = {"country": "China", "city": "Beijing"}
        expected[f"({number},{json.dumps(person)})"] += 1
    assert _payloads(capsys.readouterr().out, parallelism) == expected


class CountWithTtl(KeyedProcessFunction):
    """Counts each key's records in a ValueState whose entries expire an hour after writing."""

    def open(self, runtime_context) -> None:
        ttl = (
            StateTtlConfig.new_builder(Time.hours(1))
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .build()
        )
        descriptor = ValueStateDescriptor("count", Types.INT())
        descriptor.enable_time_to_live(ttl)
        self.count = runtime_context.get_state(descriptor)

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value[0], count


@pytest.mark.parametrize("parallelism", [1, 2])
def test_keyed_state_with_a_ttl_counts_per_key(runner, tmp_path, capsys, parallelism):
    env = _env(runner, tmp_path, parallelism)
    events = [("alice", 1), ("bob", 2), ("alice", 3), ("carol", 4), ("alice", 5), ("bob", 6)]
    (
        env.from_collection(events, type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda e: e[0])
        .process(CountWithTtl(), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .print()
    )
    env.execute("state access")
    seen = Counter()
    expected = Counter()
    for name, _ in events:
        seen[name] += 1
        expected[f"({name},{seen[name]})"] += 1
    assert _payloads(capsys.readouterr().out, parallelism) == expected

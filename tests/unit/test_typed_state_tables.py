"""Keyed state of a declared type is written to state files as typed columns
(state/typed_tables.py): restored as the type's codec gives values back, a misfit fails the
snapshot naming the state, key and type, and undeclared or TTL state stays pickled."""

from __future__ import annotations

import io
import pickle

import pytest

from tidegate.common import Row, Time, Types
from tidegate.common.type_format import RecordTypeError
from tidegate.datastream.state import (
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from tidegate.state.heap import HeapKeyedStateBackend
from tidegate.state.snapshot_format import read_key_groups, write_state_file
from tidegate.state.typed_tables import TypedTable

M = 16
PERSON = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])


def _restored(backend: HeapKeyedStateBackend) -> dict[str, dict]:
    """Write a snapshot of `backend`, read it back: state name -> {key: value}."""
    out = io.BytesIO()
    index = write_state_file(out, backend.snapshot(), None)
    tables: dict[str, dict] = {}
    for _kg, data in read_key_groups(io.BytesIO(out.getvalue()), index, range(M)):
        for name, (_kind, entries) in data.items():
            assert type(entries) is dict  # readers get plain dicts
            tables.setdefault(name, {}).update(entries)
    return tables


def test_declared_values_round_trip_as_their_type_and_undeclared_ones_as_they_are():
    backend = HeapKeyedStateBackend(M, range(M))
    count = backend.get_state(ValueStateDescriptor("count", Types.DOUBLE()))
    person = backend.get_reducing_state(ReducingStateDescriptor("person", lambda a, b: b, PERSON))
    plain = backend.get_state(ValueStateDescriptor("plain"))
    for key in range(50):
        backend.current_key = f"k{key}"
        count.update(key)  # an int in a DOUBLE state
        person.add(("ann", key))  # a tuple in a ROW state
        plain.update((key, "x"))
    tables = _restored(backend)
    assert tables["count"] == {f"k{k}": float(k) for k in range(50)}
    assert all(type(v) is float for v in tables["count"].values())
    assert tables["person"]["k7"] == Row(name="ann", age=7) and tables["person"]["k7"].age == 7
    assert tables["plain"] == {f"k{k}": (k, "x") for k in range(50)}


def test_a_value_that_does_not_fit_its_declared_type_fails_the_snapshot_naming_it():
    backend = HeapKeyedStateBackend(M, range(M))
    count = backend.get_state(ValueStateDescriptor("count", Types.LONG()))
    backend.current_key = "good"
    count.update(1)
    backend.current_key = "bad"
    count.update("one")
    with pytest.raises(RecordTypeError) as error:
        write_state_file(io.BytesIO(), backend.snapshot(), None)
    message = str(error.value)
    assert "state 'count' declares Long, but the value of key 'bad' does not fit it" in message
    assert "'one' (str) does not match Long: expected an int" in message


def test_ttl_state_keeps_its_wrapped_values_pickled():
    backend = HeapKeyedStateBackend(M, range(M))
    descriptor = ValueStateDescriptor("ttl", Types.LONG())
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.minutes(1)).build())
    state = backend.get_state(descriptor)
    backend.current_key = 1
    state.update(5)
    restored = HeapKeyedStateBackend(M, range(M))
    out = io.BytesIO()
    index = write_state_file(out, backend.snapshot(), None)
    restored.restore(read_key_groups(io.BytesIO(out.getvalue()), index, range(M)))
    again = restored.get_state(descriptor)
    restored.current_key = 1
    assert again.value() == 5


def test_a_typed_table_pickles_smaller_than_the_dict_for_rows():
    table = TypedTable("person", PERSON)
    table.update({i: Row(name=f"n{i}", age=i) for i in range(1000)})
    assert pickle.loads(pickle.dumps(table)) == dict(table)
    assert len(pickle.dumps(table)) < len(pickle.dumps(dict(table))) / 2

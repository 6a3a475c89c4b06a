"""PyFlink's event-time timer example (apache-flink's examples/datastream/event_time_timer.py):
the same job, written here with tidegate's imports, prints what Flink prints for it.

The example sums a value per key and registers an event-time timer 2 s after each record; the
collection is tiny, so every timer fires at the end of the input (the maximum watermark) and
emits the key's final sum: four lines per key. (The windowing examples are in test_windows.py.)
"""

from __future__ import annotations

import sys

import cloudpickle

from tests.support.output import committed_lines
from tidegate.common import Configuration, Duration, Encoder, WatermarkStrategy
from tidegate.common.typeinfo import Types
from tidegate.common.watermark_strategy import TimestampAssigner
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.file_system import FileSink
from tidegate.datastream.functions import KeyedProcessFunction
from tidegate.datastream.state import ValueStateDescriptor

# Pytest imports this file as a top-level module the slot processes cannot import, so the
# classes defined here travel to them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

READINGS = [
    (1000, "Alice", 110.1),
    (4000, "Bob", 30.2),
    (3000, "Alice", 20.0),
    (2000, "Bob", 53.1),
    (5000, "Alice", 13.1),
    (3000, "Bob", 3.1),
    (7000, "Bob", 16.1),
    (10000, "Alice", 20.1),
]


class SumThenReport(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(
            ValueStateDescriptor("state", Types.PICKLED_BYTE_ARRAY())
        )

    def process_element(self, value, ctx):
        self.total.update((self.total.value() or 0) + value[2])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 2000)

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), self.total.value()


class FirstField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return int(value[0])


def test_the_event_time_timer_example_reports_each_keys_sum_once_per_timer(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", "local")
    )
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_seconds(2)
    ).with_timestamp_assigner(FirstField())
    (
        env.from_collection(READINGS)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda value: value[1])
        .process(SumThenReport())
        .sink_to(FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build())
    )
    env.execute()
    alice = sum(v for _, k, v in READINGS if k == "Alice")
    bob = sum(v for _, k, v in READINGS if k == "Bob")
    # timers are deduplicated per (key, timestamp): Alice's at 3, 5, 7, 12 s, Bob's at 4, 5, 6, 9 s
    assert sorted(committed_lines(tmp_path)) == sorted(
        [str(("Alice", alice))] * 4 + [str(("Bob", bob))] * 4
    )

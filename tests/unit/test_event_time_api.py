"""The event-time DataStream API: watermark strategies at a source and mid-stream, side
outputs in the job graph (always chained to their producer, at its parallelism), and clear
errors. Whole jobs run in tests/e2e/test_event_time.py."""

from __future__ import annotations

import pytest

from tidegate.common import WatermarkStrategy
from tidegate.common.watermark_strategy import TimestampAssigner
from tidegate.datastream import (
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from tidegate.datastream.connectors.number_seq import NumberSequenceSource
from tidegate.datastream.output_tag import OutputTag as OutputTagAtPyFlinkPath
from tidegate.graph.job_graph import build_job_graph
from tidegate.runtime.operators import OperatorRuntime
from tidegate.runtime.timestamps import TimestampsAndWatermarksOperator

TAG = OutputTag("odd", None)


class Split(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            ctx.output(TAG, value)
        else:
            yield value


class TimesTen(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value * 10


def new_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)


def test_a_side_output_runs_chained_to_its_producer_at_the_producers_parallelism():
    env = new_env(4)
    main = env.from_source(NumberSequenceSource(0, 9), None, "n").process(Split())
    main.set_parallelism(2).disable_chaining()
    main.print()
    main.get_side_output(TAG).map(str).print()
    graph = build_job_graph(env._stream_graph, "j", 4, None)
    [vertex] = [v for v in graph.vertices.values() if "Process" in v.name]
    names = [op.name for op in vertex.operators]
    assert names[:2] == ["Process", "SideOutput: odd"] and vertex.parallelism == 2


def test_side_outputs_need_an_output_tag_and_an_operator():
    env = new_env()
    ds = env.from_source(NumberSequenceSource(0, 9), None, "n")
    with pytest.raises(TypeError, match="OutputTag"):
        ds.process(Split()).get_side_output("odd")
    with pytest.raises(TypeError, match="no side outputs"):
        ds.get_side_output(TAG)
    with pytest.raises(ValueError, match="non-empty"):
        OutputTag("")
    assert OutputTagAtPyFlinkPath is OutputTag and OutputTag("a") == OutputTag("a", "type")


def test_a_watermark_strategy_at_a_source_needs_a_timestamp_assigner():
    env = new_env()
    with pytest.raises(ValueError, match="with_timestamp_assigner"):
        env.from_source(
            NumberSequenceSource(0, 9), WatermarkStrategy.for_monotonous_timestamps(), "n"
        )
    with pytest.raises(TypeError, match="WatermarkStrategy"):
        env.from_source(NumberSequenceSource(0, 9), "monotonous", "n")
    env.from_source(NumberSequenceSource(0, 9), WatermarkStrategy.no_watermarks(), "n")


def test_assign_timestamps_and_watermarks_drops_upstream_idleness_and_watermarks():
    class Keep:
        def __init__(self) -> None:
            self.items: list = []

        def process_batch(self, records) -> None:
            self.items.append(list(records))

        def process_watermark(self, watermark) -> None:
            self.items.append(("wm", watermark))

        def process_watermark_status(self, idle) -> None:
            self.items.append(("idle", idle))

    op = TimestampsAndWatermarksOperator(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(TimesTen()), 0
    )
    keep = Keep()
    op.outputs = [keep]
    op.initialize_state(OperatorRuntime(0, 1, 128, 0), None)
    op.open()
    op.process_watermark_status(True)
    op.process_watermark(1_000)
    assert keep.items == []

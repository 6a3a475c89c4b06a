"""The DataStream API's event-time pieces, kept out of data_stream.py: timestamp assignment
with a WatermarkStrategy (at a source or mid-stream) and side outputs."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from tidegate.common.execution_config import auto_watermark_interval
from tidegate.common.typeinfo import as_type_info
from tidegate.common.watermark_strategy import WatermarkStrategy
from tidegate.datastream.output_tag import OutputTag
from tidegate.runtime.dead_letters import DEAD_LETTER_TAG_ID
from tidegate.runtime.timestamps import TimestampsAndWatermarksOperator

if TYPE_CHECKING:
    from tidegate.datastream.data_stream import DataStream


def check_strategy(
    strategy: Any, at_source: bool, source_timestamps: bool = False
) -> WatermarkStrategy | None:
    """`strategy` if usable (None stays None); a clear error otherwise. `source_timestamps`:
    the source attaches timestamps of its own (connectors/base.py `attaches_timestamps`), which
    a strategy without a timestamp assigner uses."""
    if strategy is None:
        return None
    if not isinstance(strategy, WatermarkStrategy):
        raise TypeError(
            "expected a WatermarkStrategy (e.g. WatermarkStrategy.for_bounded_out_of_orderness("
            f"Duration.of_seconds(5)).with_timestamp_assigner(...)), got {type(strategy).__name__}"
        )
    no_timestamps = at_source and not source_timestamps
    if no_timestamps and strategy.generates_watermarks and strategy.timestamp_assigner is None:
        raise ValueError(
            "this source does not attach timestamps to records, so a WatermarkStrategy at "
            "a source needs a timestamp assigner: add .with_timestamp_assigner(MyAssigner()) "
            "(a TimestampAssigner whose extract_timestamp(value, record_timestamp) returns int "
            "milliseconds)"
        )
    return strategy


def assign_timestamps_and_watermarks(stream: DataStream, strategy: Any) -> DataStream:
    checked = check_strategy(strategy, at_source=False)
    if checked is None:
        raise TypeError("assign_timestamps_and_watermarks needs a WatermarkStrategy, got None")
    interval = partial(auto_watermark_interval, stream._env._config)  # read at submission
    op = partial(TimestampsAndWatermarksOperator, checked, interval)
    return stream._add(
        "timestamps_watermarks", "Timestamps/Watermarks", op, output_type=stream._declared_type()
    )


#: kinds of operators whose function's failures can go to dead letters (runtime MapOperator's)
_ROUTES_DEAD_LETTERS = ("map", "flat_map", "filter", "process", "reduce")


def get_side_output(stream: DataStream, tag: Any, operator_class: type) -> DataStream:
    if not isinstance(tag, OutputTag):
        raise TypeError(
            f"get_side_output expects an OutputTag, got {type(tag).__name__}; create one with "
            "OutputTag('name', type_info)"
        )
    upstream = stream._transformation  # the operator producing the side output
    if tag.tag_id == DEAD_LETTER_TAG_ID and upstream.kind not in _ROUTES_DEAD_LETTERS:
        raise TypeError(
            f"{upstream.name} cannot route records to dead letters: only map, flat_map, "
            "filter, process and keyed reduce operators do; do the work that may fail on a "
            "record in one of those (e.g. parse in a map) and read its DEAD_LETTERS"
        )
    if upstream.kind in ("source", "sink", "side_output"):
        raise TypeError(
            f"{upstream.name} has no side outputs: get_side_output applies to the stream a "
            "process function (or window operator) returns"
        )
    return stream._add(
        "side_output",
        f"SideOutput: {tag.tag_id}",
        partial(operator_class, tag.tag_id),
        inputs=[(upstream, None)],
        output_type=as_type_info(tag.type_info, "OutputTag(type_info=...)"),
    )

"""Two-input operators: an operator that reads two inputs (e.g. a regular stream and a broadcast
stream) and must know which input each record batch came from.

The execution plan says which input each input channel of a subtask feeds
(`JobGraph.channel_inputs`); for a two-input head the task hands batches to `input_dispatch`'s
callable, which calls `process_batch1` or `process_batch2` by channel. Events
(barriers, end of partition, ...) are not per input: barrier alignment covers every channel of
both inputs, as it covers every channel of a union.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tidegate.runtime.operators import StreamOperator

__all__ = ["TwoInputStreamOperator", "input_dispatch"]


class TwoInputStreamOperator(StreamOperator):
    """Base of operators with two inputs; always the head of its chain (it is never chained to
    an upstream operator, since it has two)."""

    def process_batch1(self, records: list) -> None:
        """A batch of the first input."""
        raise NotImplementedError

    def process_batch2(self, records: list) -> None:
        """A batch of the second input."""
        raise NotImplementedError

    def process_batch(self, records: list) -> None:
        raise TypeError(
            f"{type(self).__name__} has two inputs: batches go to process_batch1/process_batch2"
        )


def input_dispatch(
    head: StreamOperator, channel_inputs: Sequence[int]
) -> Callable[[int, list], None] | None:
    """`process(channel, batch)` handing a batch read from input channel `channel` to the input
    of two-input `head` that the channel feeds (`channel_inputs[c]`: 0 or 1); None for a
    one-input head, which takes every batch in `process_batch`."""
    if not isinstance(head, TwoInputStreamOperator):
        return None
    if not channel_inputs:
        raise ValueError(f"{head.name}: a two-input operator needs the input of each channel")
    inputs = tuple(channel_inputs)
    first, second = head.process_batch1, head.process_batch2

    def process(channel: int, batch: list) -> None:
        if inputs[channel]:
            second(batch)
        else:
            first(batch)

    return process

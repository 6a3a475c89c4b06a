"""Two-input operators: an operator that reads two inputs (e.g. a regular stream and a broadcast
stream) and must know which input each record batch came from.

The execution plan says which input each input channel of a subtask feeds
(`JobGraph.channel_inputs`); the task hands batches to `batch_dispatch`'s callable, which calls
`process_batch1` or `process_batch2` for a two-input head and `process_batch` otherwise. Events
(barriers, end of partition, ...) are not per input: barrier alignment covers every channel of
both inputs, as it covers every channel of a union.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tidegate.runtime.operators import StreamOperator

__all__ = ["TwoInputStreamOperator", "batch_dispatch"]


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


def batch_dispatch(
    head: StreamOperator, channel_inputs: Sequence[int]
) -> Callable[[int, list], None]:
    """`process(channel, batch)`: hands a batch read from input channel `channel` to `head`.

    `channel_inputs[c]` is the input (0 or 1) channel c feeds. A one-input head takes every
    batch in `process_batch`; a head with two inputs needs the channel map.
    """
    if not isinstance(head, TwoInputStreamOperator):
        process = head.process_batch
        return lambda _channel, batch: process(batch)
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

"""Transactional ids of the exactly-once Kafka sink, and which ones a restore fences: pure.

Writer index `k` uses the ids `<prefix>-<k>-<slot>` for slot in [0, pool_size): one producer
(and transaction) per slot, so a new transaction can start while earlier ones wait for their
checkpoint to complete. The id set of an index is finite and known, so a restore can fence
every id a crashed writer may have left a transaction open on, whatever the old parallelism.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "ids_to_fence",
    "marker_group",
    "prefix_of",
    "taken_over_indexes",
    "transactional_id",
]


def transactional_id(prefix: str, writer_index: int, slot: int) -> str:
    return f"{prefix}-{writer_index}-{slot}"


def prefix_of(txn_id: str) -> str:
    """The prefix of an id `transactional_id` made."""
    prefix, writer_index, slot = txn_id.rsplit("-", 2)
    if not (prefix and writer_index.isdigit() and slot.isdigit()):
        raise ValueError(f"not a transactional id of the Kafka sink: {txn_id!r}")
    return prefix


def marker_group(prefix: str, writer_index: int, instance: str) -> str:
    """The consumer group whose committed offset records, atomically with each transaction a
    writer instance commits, the id of that transaction's checkpoint (see sink.py, step 3).

    One group per writer instance (`instance`: a random name chosen when the writer starts),
    so the marker only grows (the instance commits its checkpoints in order) and a later job
    reusing the prefix, whose checkpoint ids start again at 1, is not misled by it."""
    return f"{prefix}-{writer_index}-{instance}-committed"


def ids_to_fence(prefix: str, writer_indexes: Iterable[int], pool_size: int) -> list[str]:
    """Every transactional id of the given writer indexes (the ones a recovering subtask takes
    over), in order."""
    if pool_size < 1:
        raise ValueError(f"pool size must be >= 1: {pool_size}")
    return [
        transactional_id(prefix, k, slot)
        for k in sorted(set(writer_indexes))
        for slot in range(pool_size)
    ]


def taken_over_indexes(
    subtask_index: int, parallelism: int, restored_indexes: Iterable[int]
) -> list[int]:
    """The writer indexes whose leftovers `subtask_index` cleans up: its own, and the restored
    ones (from any old parallelism) that `writer_subtask` gives it."""
    return sorted(
        {subtask_index} | {k for k in restored_indexes if k % parallelism == subtask_index}
    )

"""The job script `tidegate chaos` runs in tests/e2e/test_chaos.py, unchanged by the harness:
generated numbers keyed by `value % KEYS` through a running count per key into a FileSink,
one `key,count` line per record (the same lines in every run, whatever order the two source
readers' records arrive in). `chaos_job.py VARIANT [COUNT RATE]`:

- `counts`: the count in keyed ValueState, our FileSink: exactly once under any fault;
- `attribute`: the planted bug of a count kept in a plain Python attribute (a dict on the
  function object) instead of managed state: a restore resets it, so after a failure the
  counts start again from 1 (lines duplicated, higher counts lost);
- `eager`: the planted bug of a sink that commits in its pre-commit, before the checkpoint
  completed: a checkpoint that then fails leaves records committed that the restarted job
  writes again (duplicated).
"""

from __future__ import annotations

import sys

from tidegate.common import Encoder, WatermarkStrategy
from tidegate.connectors.file_sink import FileSinkWriter
from tidegate.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.connectors.file_system import BucketAssigner, FileSink
from tidegate.datastream.state import ValueStateDescriptor

KEYS = 16
#: where the script says its output and checkpoints go: not writable, so the job runs only if
#: the harness moved them
NOWHERE = "/nonexistent/moved-by-the-harness"


class StateCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield f"{value % KEYS},{count}"


class AttributeCount(KeyedProcessFunction):
    """The bug: the counts live in the function object, which no checkpoint captures."""

    def open(self, runtime_context):
        self.counts = {}

    def process_element(self, value, ctx):
        key = value % KEYS
        self.counts[key] = self.counts.get(key, 0) + 1
        yield f"{key},{self.counts[key]}"


class EagerCommitFileSink(FileSink):
    """The bug: its writer commits what it pre-commits at once, not when the checkpoint
    completed."""

    def create_writer(self, subtask_index, parallelism, attempt):
        return EagerCommitWriter(self, subtask_index, attempt, self.create_committer())


class EagerCommitWriter(FileSinkWriter):
    def __init__(self, sink, subtask_index, attempt, committer):
        super().__init__(sink, subtask_index, attempt)
        self.committer = committer

    def prepare_commit(self, checkpoint_id):
        committables = super().prepare_commit(checkpoint_id)
        self.committer.commit(committables)
        return committables


def main(variant: str, count: int, rate: float) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage_dir(NOWHERE)
    sink = (
        FileSink.for_row_format(NOWHERE, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )
    if variant == "eager":  # the builder builds a FileSink: the same settings, the buggy class
        sink = EagerCommitFileSink(**{f: getattr(sink, f) for f in sink.__dataclass_fields__})
    function = AttributeCount() if variant == "attribute" else StateCount()
    source = DataGeneratorSource(lambda i: i, count=count, records_per_second=rate)
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "numbers")
        .uid("numbers")
        .key_by(lambda value: value % KEYS)
        .process(function)
        .uid("count")
        .sink_to(sink)
        .uid("sink")
    )
    env.execute(f"chaos test job ({variant})")


if __name__ == "__main__":
    variant = sys.argv[1]
    if variant not in ("counts", "attribute", "eager"):
        sys.exit(f"unknown variant {variant!r}: counts, attribute or eager")
    count, rate = (int(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (6000, 1500)
    main(variant, count, rate)

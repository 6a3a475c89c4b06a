"""Which directories an attempt proves shared (deploy/storage_checks.py): the checkpoint
directory for every slot, and each path a sink declares (connectors/base.py SharedPathSink)
for the slots hosting that sink; check files are deleted, and an unwritable path is named."""

from __future__ import annotations

import pytest

from tidegate.checkpoint.errors import CheckpointStorageError
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.common import Encoder
from tidegate.connectors.file_sink import BucketAssigner, FileSink
from tidegate.connectors.number_seq import NumberSequenceSource
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.deploy.storage_checks import remove_checks, write_attempt_checks


def _job(out: str):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    numbers = env.from_source(NumberSequenceSource(0, 9), None, "numbers")
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder())
    numbers.map(str).set_parallelism(1).sink_to(
        sink.with_bucket_assigner(BucketAssigner.base_path_bucket_assigner()).build()
    ).uid("files")
    numbers.print()  # a sink without shared paths
    return env._job_spec("checks").graph


def test_an_attempt_checks_the_checkpoint_directory_and_each_file_sinks_path(tmp_path):
    graph = _job(str(tmp_path / "out"))
    storage = CheckpointStorage(str(tmp_path / "chk"), "job-1")
    checks = write_attempt_checks(storage, graph)
    sink_vertex = next(
        v.vertex_id for v in graph.vertices.values() if any(o.uid == "files" for o in v.operators)
    )
    assert [(c.what, c.directory, c.vertex_id) for c in checks] == [
        (f"the checkpoint directory {tmp_path}/chk", f"{tmp_path}/chk/job-1", None),
        (f"the path {tmp_path}/out of sink 'files'", f"{tmp_path}/out", sink_vertex),
    ]
    hidden = [p.name for p in (tmp_path / "out").iterdir()]
    assert hidden == [f".storage-check-{checks[1].token}"]
    remove_checks(checks, storage)
    assert list((tmp_path / "out").iterdir()) == []
    assert not any(
        p.name.startswith(".storage-check") for p in (tmp_path / "chk" / "job-1").iterdir()
    )


def test_a_sink_path_the_driver_cannot_write_fails_the_attempt_naming_it(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    graph = _job(str(tmp_path / "file" / "out"))
    storage = CheckpointStorage(str(tmp_path / "chk"), "job-1")
    with pytest.raises(CheckpointStorageError) as refused:
        write_attempt_checks(storage, graph)
    assert f"cannot write into the path {tmp_path}/file/out of sink 'files'" in str(refused.value)
    # the checkpoint directory's file of this attempt was removed again
    assert list((tmp_path / "chk" / "job-1").iterdir()) == []

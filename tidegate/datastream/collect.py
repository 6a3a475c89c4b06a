"""`DataStream.execute_and_collect`: run the job and hand its records back to the driver.

The records go through the exactly-once file sink into a directory of their own under the
job's checkpoint storage (which every worker can write; on a cluster it is shared storage),
one pickled record per line (base64, so any object fits a line). A part file becomes visible
when the checkpoint that covers it completes, or at the end of a bounded job, so the driver
sees each record once, also across failures and restarts. The iterator reads the part files as
they appear, and after the job ended whatever is left; an unbounded job's records arrive only
with checkpoints, so it needs checkpointing enabled. Closing the iterator (or reaching the
limit) cancels a job that still runs and deletes the directory.
"""

from __future__ import annotations

import base64
import contextlib
import pickle
import posixpath
import time
import uuid
from collections.abc import Iterator
from concurrent import futures
from typing import TYPE_CHECKING, Any

from tidegate.common.serialization import Encoder
from tidegate.connectors.file_sink import BucketAssigner, FileSink

if TYPE_CHECKING:
    from tidegate.common.job_client import JobClient
    from tidegate.datastream.data_stream import DataStream

#: how often the iterator looks for new part files while the job runs
POLL_INTERVAL_S = 0.05
#: how long closing waits for a cancelled job to stop
CANCEL_TIMEOUT_S = 120


def _encode(record: Any) -> bytes:
    return base64.b64encode(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)) + b"\n"


class CloseableIterator:
    """The collected records (PyFlink's CloseableIterator); use it in a `with` block or call
    `close()` to stop a job that still runs and delete the records' directory."""

    def __init__(self, client: JobClient, directory: str, limit: int | None = None) -> None:
        self._client = client
        # the job's checkpoint storage, with its filesystem options
        self._fs, self._directory = client.jobmaster.spec.filesystems.resolve(directory)
        self._limit = limit
        self._seen: set[str] = set()
        self._records = self._read()

    def __iter__(self) -> CloseableIterator:
        return self

    def __next__(self) -> Any:
        return next(self._records)

    def __enter__(self) -> CloseableIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the job if it still runs, and delete the collected files."""
        result = self._client.get_job_execution_result()
        if not result.done():
            self._client.cancel()
            # the job ends CANCELED (its result then holds that error, which is no news here)
            if not futures.wait([result], timeout=CANCEL_TIMEOUT_S).done:
                raise TimeoutError(
                    f"the collecting job did not stop within {CANCEL_TIMEOUT_S}s of its cancel"
                )
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm(self._directory, recursive=True)

    def _read(self) -> Iterator[Any]:
        returned = 0
        result = self._client.get_job_execution_result()
        while True:
            finished = result.done()  # read before the scan: nothing is committed after it
            for record in self._new_records():
                yield record
                returned += 1
                if self._limit is not None and returned >= self._limit:
                    self.close()
                    return
            if finished:
                result.result()  # a failed job raises JobExecutionException here
                self.close()
                return
            time.sleep(POLL_INTERVAL_S)

    def _new_records(self) -> Iterator[Any]:
        """The records of committed part files not read yet (hidden files are in progress)."""
        if not self._fs.isdir(self._directory):
            return
        names = (posixpath.basename(p) for p in self._fs.ls(self._directory, detail=False))
        for name in sorted(names):
            if name.startswith(".") or name in self._seen:
                continue
            self._seen.add(name)
            with self._fs.open(posixpath.join(self._directory, name), "rb") as f:
                for line in f:
                    yield pickle.loads(base64.b64decode(line))


def execute_and_collect(
    stream: DataStream, job_execution_name: str | None, limit: int | None
) -> CloseableIterator | list[Any]:
    """Add the collecting sink to `stream`, run the job, and return its records: a list of at
    most `limit` records, or (no limit) an iterator over all of them."""
    if limit is not None and int(limit) < 1:
        raise ValueError(f"limit must be >= 1 or None, got {limit}")
    env = stream._env
    base = str(env._checkpoint_settings().storage)  # shared by every worker on a cluster
    directory = f"{base.rstrip('/')}/collect-{uuid.uuid4().hex[:12]}"
    sink = (
        FileSink.for_row_format(directory, Encoder(_encode))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()
    )
    stream.sink_to(sink).name("Collect Sink")
    client = env.execute_async(job_execution_name)
    iterator = CloseableIterator(client, directory, limit)
    if limit is None:
        return iterator
    with iterator:
        return list(iterator)


__all__ = ["CloseableIterator", "execute_and_collect"]

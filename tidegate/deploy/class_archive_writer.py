"""The writer of a class-data-sharing archive (deploy/class_archive.py), run as a process of
its own by `class_archive.start_writer`: `python -m tidegate.deploy.class_archive_writer
SETTINGS_JSON`. (A module apart from class_archive: it starts a SparkContext as
deploy/spark_session.py does, which itself plans the archive with class_archive.)"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tidegate.deploy.class_archive import (
    QUIET,
    acquire,
    cache_directory,
    finish_writing,
    installation_key,
    prune,
    published,
    record_installation,
    spark_jars_directory,
)
from tidegate.deploy.java import use_java
from tidegate.deploy.spark_session import JVM_OPTIONS, start_context, task_slots


def write_archive(conf: dict[str, str]) -> Path | None:
    """Write this installation's archive, if no other process does: a SparkContext on
    `local[1]` whose JVM dumps its classes at exit, after one barrier stage (the classes of a
    job's first stage are in the archive too)."""
    runtime = use_java()
    jars = spark_jars_directory()
    key = installation_key(runtime.java, jars, os.environ, conf)
    directory = cache_directory(os.environ)
    writer = acquire(directory, key, os.getpid())
    if writer is None:
        return None
    record_installation(directory, key, [os.path.realpath(runtime.java), jars])
    prune(directory)
    options = f"{JVM_OPTIONS} -XX:ArchiveClassesAtExit={writer.partial} {QUIET}"
    try:
        context = start_context("local[1]", conf, options)
        # what a job's start does in the JVM (deploy/spark_session.py, deploy/runners.py)
        task_slots(context, 1)
        context.setJobGroup("tidegate-class-archive", "class archive", interruptOnCancel=True)
        context.parallelize([0], 1).barrier().mapPartitions(_no_records).collect()
        jvm = context._gateway.proc
        context.stop()
    except BaseException as e:
        writer.failed.write_text(f"the writer failed: {e!r}")  # not started again and again
        writer.release()
        raise
    finish_writing(writer, jvm)
    return published(directory, key)


def _no_records(records: Iterable[Any]) -> Iterable[Any]:
    return iter(())


if __name__ == "__main__":
    os.nice(19)  # the job that started it comes first (its JVM inherits this)
    write_archive(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})

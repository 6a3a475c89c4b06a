"""A class-data-sharing (AppCDS) archive of the driver JVM's classes, written once per Java
runtime and Spark installation into the user's cache directory, and mapped by every later
driver JVM of a session tidegate creates: the JVM then loads Spark's classes from the archive
instead of parsing and verifying them from the jars (bench/README.md, Start-up: the session
start takes about half the time and CPU).

The first session of an installation starts without one and starts its writer, a process of
its own (`python -m tidegate.deploy.class_archive_writer`, in a session of its own at nice
19, so the job's process never waits for it): a SparkContext on `local[1]` whose JVM runs with
`-XX:ArchiveClassesAtExit=<a file of its own>` and one barrier stage; the JVM writes the
archive of the classes it loaded when it exits (~70 MB; 10-40 s of one core on a loaded 2-core
machine, once). The writer ends its JVM (the gateway stops when its standard input closes),
waits for it (`WRITE_TIMEOUT_S`), and publishes the file by an atomic rename when the JVM exited
with 0. Its final name carries its size: a JVM maps a truncated archive and crashes (SIGBUS, Java
17), so a file whose size differs from its name is never used. One writer at a time per
archive (a lock file naming its process; a dead owner's lock is taken over). A JVM that cannot
use an archive (another JDK build, another classpath) starts without it: its warnings are
turned off (`-Xlog:cds=off`). A session that fails to start while an archive is in play is
started again without one, the archive deleted: an archive never fails a job.

`tidegate.spark.class-archive: false` turns it off; so does the job's own
`spark.driver.extraJavaOptions`, which replaces tidegate's JVM options.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the JVM's class-data-sharing messages (an archive it cannot use) are not the user's concern
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: how long the writer waits for its JVM to write the archive (at nice 19 on a busy machine the
#: JVM gets little CPU; nobody waits for the writer)
WRITE_TIMEOUT_S = 1800.0
#: environment variables that change the driver JVM's classpath (spark-class puts them on it)
CLASSPATH_VARIABLES = ("SPARK_DIST_CLASSPATH", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR")
#: settings that change the driver JVM's classpath
CLASSPATH_SETTINGS = ("spark.driver.extraClassPath",)
_PUBLISHED = re.compile(r"spark-(?P<key>[0-9a-f]{16})-(?P<size>\d+)\.jsa")


def cache_directory(environ: Mapping[str, str]) -> Path:
    """Where the archives go: `$XDG_CACHE_HOME/tidegate/cds`, default `~/.cache/tidegate/cds`."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tidegate" / "cds"


def installation_key(
    java: str, spark_jars: str, environ: Mapping[str, str], conf: Mapping[str, str]
) -> str:
    """What the archive depends on, hashed: the Java runtime (its executable and its module
    image), Spark's jars (names, sizes, modification times) and what else the driver's
    classpath is made of. A change of any gives another archive."""
    parts = [os.path.realpath(java), os.path.realpath(spark_jars)]
    home = os.path.dirname(os.path.dirname(os.path.realpath(java)))
    parts += _file_facts([os.path.join(home, "lib", "modules")])
    jars = sorted(os.listdir(spark_jars)) if os.path.isdir(spark_jars) else []
    parts += _file_facts(os.path.join(spark_jars, name) for name in jars)
    parts += [f"{k}={environ.get(k, '')}" for k in CLASSPATH_VARIABLES]
    parts += [f"{k}={conf.get(k, '')}" for k in CLASSPATH_SETTINGS]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _file_facts(paths: Iterable[str]) -> list[str]:
    facts = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            facts.append(f"{path} -")
            continue
        facts.append(f"{os.path.basename(path)} {st.st_size} {st.st_mtime_ns}")
    return facts


def published(directory: Path, key: str) -> Path | None:
    """The published archive of `key` whose size is the one its name records, or None."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for name in names:
        match = _PUBLISHED.fullmatch(name)
        if match is None or match["key"] != key:
            continue
        path = directory / name
        with contextlib.suppress(OSError):
            if path.stat().st_size == int(match["size"]):
                return path
    return None


def record_installation(directory: Path, key: str, paths: list[str]) -> None:
    """Note which files `key`'s archive was made for (the Java runtime, Spark's jars), so that
    `prune` can tell when they are gone."""
    (directory / f"spark-{key}.paths").write_text(json.dumps(paths))


def prune(directory: Path, alive: Callable[[int], bool] | None = None) -> list[str]:
    """Delete the archives (and marks) of installations whose Java runtime or Spark jars no
    longer exist (a removed virtual environment, an upgraded Java): each is ~70 MB. Returns the
    keys pruned. An installation being written (its lock's process alive) is left alone."""
    alive = alive or _pid_alive
    pruned = []
    for record in directory.glob("spark-*.paths"):
        key = record.name.removeprefix("spark-").removesuffix(".paths")
        try:
            paths = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if all(os.path.exists(p) for p in paths):
            continue
        with contextlib.suppress(OSError, ValueError):
            if alive(int(ArchiveWriter(directory, key, 0).lock.read_text() or "0")):
                continue
        for stale in directory.glob(f"spark-{key}[-.]*"):
            stale.unlink(missing_ok=True)
        pruned.append(key)
    return pruned


def _pid_alive(pid: int) -> bool:
    if pid <= 0:  # not a process (kill(0) would signal this process's group)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class ArchiveWriter:
    """This process's turn to write the archive of `key`: the JVM writes `partial`."""

    directory: Path
    key: str
    pid: int

    @property
    def lock(self) -> Path:
        return self.directory / f"spark-{self.key}.lock"

    @property
    def failed(self) -> Path:
        """Left when a writer failed: no writer starts again (each costs a JVM start and a dump)
        until it is deleted."""
        return self.directory / f"spark-{self.key}.failed"

    @property
    def partial(self) -> Path:
        return self.directory / f"spark-{self.key}.{self.pid}.partial"

    def publish(self, jvm_exit_code: int | None) -> Path | None:
        """After the JVM exited: the archive under its final name if the JVM wrote it (exit 0,
        a non-empty file), else nothing (and the `failed` mark); the lock is released."""
        try:
            size = self.partial.stat().st_size if self.partial.exists() else 0
            if jvm_exit_code != 0 or size == 0:
                self.failed.write_text(f"the JVM exited with {jvm_exit_code}, wrote {size} bytes")
                return None
            if published(self.directory, self.key):
                return None
            final = self.directory / f"spark-{self.key}-{size}.jsa"
            os.replace(self.partial, final)  # atomic: a JVM never maps a half-written archive
            return final
        finally:
            self.release()

    def release(self) -> None:
        with contextlib.suppress(OSError):  # whatever stands there, the lock goes
            self.partial.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            if self.lock.read_text() == str(self.pid):
                self.lock.unlink()


def acquire(
    directory: Path, key: str, pid: int, alive: Callable[[int], bool] = _pid_alive
) -> ArchiveWriter | None:
    """The writer of `key`'s archive if no live process is writing it (a dead writer's lock and
    partial file are removed), else None. None too if the directory cannot be written."""
    writer = ArchiveWriter(directory, key, pid)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if writer.failed.exists():
        return None
    for _ in range(2):
        try:
            fd = os.open(writer.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(writer.lock.read_text() or "0")
            except (OSError, ValueError):
                owner = 0
            if owner and alive(owner):
                return None
            for stale in directory.glob(f"spark-{key}.*.partial"):  # a dead writer's JVM's
                stale.unlink(missing_ok=True)
            writer.lock.unlink(missing_ok=True)
            continue
        except OSError:
            return None
        with os.fdopen(fd, "w") as f:
            f.write(str(pid))
        return writer
    return None


@dataclass(frozen=True)
class ArchivePlan:
    """The JVM options of one session start, and the archive they map (None: none)."""

    java_options: str
    archive: Path | None = None

    def discard(self) -> None:
        """The session did not start with these options: never use this archive again."""
        if self.archive is not None:
            self.archive.unlink(missing_ok=True)


def plan(
    directory: Path,
    key: str,
    base_options: str,
    start_writer: Callable[[], object],
    alive: Callable[[int], bool] = _pid_alive,
) -> ArchivePlan:
    """Use the published archive of `key`; else start its writer (`start_writer`) unless a live
    process is writing it or a writer failed, and start this JVM without one."""
    archive = published(directory, key)
    if archive is not None:
        return ArchivePlan(f"{base_options} -XX:SharedArchiveFile={archive} {QUIET}", archive)
    probe = ArchiveWriter(directory, key, 0)
    try:
        directory.mkdir(parents=True, exist_ok=True)  # else no writer could write there
    except OSError:
        return ArchivePlan(base_options)
    try:
        owner = int(probe.lock.read_text() or "0")
    except (OSError, ValueError):
        owner = 0
    if not probe.failed.exists() and not (owner and alive(owner)):
        start_writer()
    return ArchivePlan(base_options)


def finish_writing(writer: ArchiveWriter, jvm: Any, timeout: float = WRITE_TIMEOUT_S) -> None:
    """End the JVM (`jvm`: its Popen, whose standard input is the gateway's lifeline: the
    gateway exits when it closes), wait for it to write the archive, and publish it. A JVM
    still writing after `timeout` keeps the lock (it names the JVM now), so no other process
    starts another archive meanwhile; its file is not published, and the next process after it
    ended writes one again."""
    if jvm.stdin is not None:
        jvm.stdin.close()
    try:
        code = jvm.wait(timeout)
    except subprocess.TimeoutExpired:
        writer.lock.write_text(str(jvm.pid))
        return
    writer.publish(code)


def start_writer(classpath_conf: Mapping[str, str]) -> subprocess.Popen:
    """The writer of this installation's archive (`class_archive_writer`), a process of its own in a
    session of its own, at the lowest CPU priority: it outlives the job's process, whose exit
    never waits for it."""
    settings = {k: v for k, v in classpath_conf.items() if k in CLASSPATH_SETTINGS}
    # the tidegate this process runs, wherever it was imported from
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "tidegate.deploy.class_archive_writer", json.dumps(settings)],
        env={**os.environ, "PYTHONPATH": path},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def spark_jars_directory() -> str:
    """The jars directory of the Spark installation PySpark launches (SPARK_HOME's, or the
    pyspark package's own)."""
    from pyspark.find_spark_home import _find_spark_home

    return os.path.join(_find_spark_home(), "jars")

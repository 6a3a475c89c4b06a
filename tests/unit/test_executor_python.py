"""Which Python the executors of a session tidegate creates run (deploy/spark_session.py): the
driver's own interpreter only on a local master; on a cluster Spark's own resolution
(`spark.pyspark.python`, PYSPARK_PYTHON, `python3`), and a worker that runs the wrong Python
fails the job with a message saying which setting to change."""

from __future__ import annotations

import sys
from pathlib import Path

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


#: Spark's error text when the executors ran the wrong Python with PySpark's own worker daemon
#: (as on cluster masters), each captured from a real failed run (Spark 4.3.0) of tidegate's
#: barrier stage with `sparkContext.pythonExec` set to the driver's Python 3.11 started with
#: -S (no site-packages: no tidegate), and to a Python 3.12 (on local masters, where tidegate's
#: worker daemon starts first, tests/e2e/test_executor_python_errors.py fails real jobs)
SPARK_ERRORS = Path(__file__).parent / "spark_errors"


@pytest.mark.parametrize(
    ("capture", "cause", "problem"),
    [
        (
            "no-tidegate.txt",
            "ModuleNotFoundError: No module named 'tidegate'",
            "the Spark executors' Python cannot import tidegate",
        ),
        (
            "other-version.txt",
            "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] "
            "Python in worker has different version: 3.12 than that in driver: 3.11, PySpark "
            "cannot run with different minor versions.",
            "the Spark executors' Python is not the driver's minor version",
        ),
    ],
    ids=["no-tidegate", "other-version"],
)
def test_executors_with_the_wrong_python_fail_naming_the_settings_to_change(
    capture, cause, problem
):
    message = runner_error_text(RuntimeError((SPARK_ERRORS / capture).read_text()))
    assert message.startswith(f"{cause} — {problem}: ")
    assert "spark.pyspark.python" in message and "PYSPARK_PYTHON" in message
    assert f"Python {sys.version_info.major}.{sys.version_info.minor}" in message

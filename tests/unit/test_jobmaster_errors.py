"""What the JobMaster tells the user when the runner itself fails."""

from __future__ import annotations

from tidegate.deploy.attempt_state import runner_error_text

SPARK_ERROR = """An error occurred while calling z:...PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/pyspark/worker.py", line 1, in main
ModuleNotFoundError: No module named 'tidegate'
\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)
"""


def test_a_spark_failure_is_reduced_to_the_python_exception_with_a_hint():
    message = runner_error_text(RuntimeError(SPARK_ERROR))
    assert message.startswith("ModuleNotFoundError: No module named 'tidegate'")
    assert "PYSPARK_PYTHON" in message


def test_an_error_without_a_python_exception_keeps_its_first_line():
    assert runner_error_text(RuntimeError("slot processes exited with codes [(0, -9)]\nmore")) == (
        "slot processes exited with codes [(0, -9)]"
    )

"""What the JobMaster tells the user when the runner itself fails."""

from __future__ import annotations

from pathlib import Path

from tidegate.deploy.attempt_state import runner_error_text

#: a real Spark failure (tests/unit/test_executor_python.py says how it was captured)
SPARK_ERROR = (Path(__file__).parent / "spark_errors" / "no-tidegate.txt").read_text()


def test_a_spark_failure_is_reduced_to_the_python_exception_with_a_hint():
    message = runner_error_text(RuntimeError(SPARK_ERROR))
    assert message.startswith("ModuleNotFoundError: No module named 'tidegate'")
    assert "PYSPARK_PYTHON" in message


def test_an_error_without_a_python_exception_keeps_its_first_line():
    assert runner_error_text(RuntimeError("slot processes exited with codes [(0, -9)]\nmore")) == (
        "slot processes exited with codes [(0, -9)]"
    )

"""Shared fixtures: one SparkSession for the whole test session (starting a JVM is slow)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from tidegate.deploy.spark_session import get_spark

    session = get_spark("local[4]", 4)
    yield session
    session.stop()


@pytest.fixture(params=["spark", "local"])
def runner(request):
    """Run a test on both runners; the Spark one on the shared session."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return request.param

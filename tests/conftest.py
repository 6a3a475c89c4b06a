"""Shared fixtures: one SparkSession (local[8]) for the whole test session (starting a JVM is
slow)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from tidegate.deploy.spark_session import get_spark

    session = get_spark("local[8]", 8)  # rescaling tests run up to 8 slots
    yield session
    session.stop()


@pytest.fixture(params=["spark", "local"])
def runner(request):
    """Run a test on both runners; the Spark one on the shared session."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return request.param


@pytest.fixture(scope="session", autouse=True)
def tidegate_home(tmp_path_factory):
    """Discovery files of the REST servers this test process (and the CLIs it runs) start go
    to a temporary TIDEGATE_HOME, not the user's ~/.tidegate."""
    import os

    home = tmp_path_factory.mktemp("tidegate-home")
    saved = os.environ.get("TIDEGATE_HOME")
    os.environ["TIDEGATE_HOME"] = str(home)
    yield home
    if saved is None:
        os.environ.pop("TIDEGATE_HOME", None)
    else:
        os.environ["TIDEGATE_HOME"] = saved

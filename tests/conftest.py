"""Shared fixtures: one SparkSession (local[8]) for the whole test session (starting a JVM is
slow); and the markers every test gets from where it is and what it uses (pyproject.toml lists
them): `unit` (tests/unit), `e2e` (tests/e2e), `spark` (uses the Spark session, directly, as the
`spark` runner, or in a subprocess it starts). `pytest -m unit` is the quick loop."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        kind = item.path.relative_to(TESTS).parts[0]
        if kind in ("unit", "e2e"):
            item.add_marker(kind)
        callspec = getattr(item, "callspec", None)
        runs_on_spark = "spark" in item.fixturenames or (
            callspec is not None and callspec.params.get("runner") == "spark"
        )
        if runs_on_spark:
            item.add_marker("spark")


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

"""Checkpoints, savepoints and stop-with-savepoint triggered over the REST API and with the
commands that use it (`tidegate trigger-checkpoint|savepoint|stop`), on jobs running on Spark."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from tests.e2e.observed import http, observed_job, rest_url
from tests.support.waiting import resolved, wait_for_end, wait_until
from tidegate.cli import cli


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    client = observed_job(tmp_path_factory.mktemp("snapshots"), "snapshots job")
    yield client
    resolved(client.cancel(), "the job to be cancelled")


def call(path: str, method: str = "GET", body=None):
    status, answer, _ = http(rest_url() + path, method, body)
    return status, answer


def operation(path: str) -> dict:
    """Poll an asynchronous operation until it completed; its `operation`."""

    def completed():
        status, answer = call(path)
        assert status == 200, answer
        return answer["operation"] if answer["status"]["id"] == "COMPLETED" else None

    return wait_until(completed, f"the operation {path} completed", interval=0.1)


def test_a_checkpoint_triggered_over_rest_completes_and_is_in_the_history(job):
    jid = job.get_job_id()
    status, answer = call(f"/jobs/{jid}/checkpoints", "POST", {})
    assert status == 202
    result = operation(f"/jobs/{jid}/checkpoints/{answer['request-id']}")
    cid = result["checkpointId"]
    assert result["location"].endswith(f"chk-{cid}")
    _, detail = call(f"/jobs/{jid}/checkpoints/details/{cid}")
    assert detail["status"] == "COMPLETED" and detail["checkpoint_type"] == "CHECKPOINT"


def test_a_savepoint_triggered_over_rest_is_written_and_shown_as_the_latest_savepoint(
    job, tmp_path
):
    jid = job.get_job_id()
    status, answer = call(f"/jobs/{jid}/savepoints", "POST", {"target-directory": str(tmp_path)})
    assert status == 202
    location = operation(f"/jobs/{jid}/savepoints/{answer['request-id']}")["location"]
    assert location.startswith(str(tmp_path)) and os.path.isfile(f"{location}/_metadata")
    _, stats = call(f"/jobs/{jid}/checkpoints")
    latest = stats["latest"]["savepoint"]
    assert latest["external_path"] == location and latest["checkpoint_type"] == "SAVEPOINT"
    assert job.jobmaster.status.name == "RUNNING"


def test_a_savepoint_that_cannot_be_taken_reports_why(job):
    jid = job.get_job_id()  # no target directory, and the job has no default one
    _, answer = call(f"/jobs/{jid}/savepoints", "POST", {})
    cause = operation(f"/jobs/{jid}/savepoints/{answer['request-id']}")["failure-cause"]
    assert (
        cause["class"] == "NoSavepointDirectoryError" and "savepoint directory" in cause["message"]
    )
    status, body = call(f"/jobs/{jid}/savepoints/{'0' * 32}")
    assert status == 404 and body["errors"]


def test_the_commands_trigger_a_checkpoint_and_a_savepoint(job, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["trigger-checkpoint", job.get_job_id()[:10]])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("checkpoint ") and " completed: " in result.stdout
    result = runner.invoke(cli, ["savepoint", job.get_job_id(), str(tmp_path)])
    assert result.exit_code == 0, result.output
    location = result.stdout.strip().removeprefix("savepoint completed: ")
    assert os.path.isfile(f"{location}/_metadata")
    result = runner.invoke(cli, ["savepoint", job.get_job_id()])
    assert result.exit_code == 1
    assert (
        "Error: savepoint of job" in result.stderr and "NoSavepointDirectoryError" in result.stderr
    )


def test_stop_with_a_savepoint_over_rest_finishes_the_job(spark, tmp_path):
    client = observed_job(tmp_path / "job", "stopped over rest", checkpoints=1)
    jid = client.get_job_id()
    body = {"targetDirectory": str(tmp_path / "sp"), "drain": False}
    status, answer = call(f"/jobs/{jid}/stop", "POST", body)
    assert status == 202
    location = operation(f"/jobs/{jid}/savepoints/{answer['request-id']}")["location"]
    assert os.path.isfile(f"{location}/_metadata")
    wait_for_end(client)
    assert client.jobmaster.status.name == "FINISHED"
    _, stats = call(f"/jobs/{jid}/checkpoints")
    assert stats["latest"]["savepoint"]["checkpoint_type"] == "SYNC_SAVEPOINT"


def test_the_stop_command_stops_a_job_with_a_drained_savepoint(spark, tmp_path):
    client = observed_job(tmp_path / "job", "stopped by the command", checkpoints=1)
    args = ["stop", client.get_job_id(), "--savepoint", str(tmp_path / "sp"), "--drain"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    prefix = f"stopped job {client.get_job_id()} with savepoint "
    assert result.stdout.startswith(prefix)
    assert os.path.isfile(f"{result.stdout.strip().removeprefix(prefix)}/_metadata")
    assert client.jobmaster.status.name == "FINISHED"


def test_a_savepoint_with_cancel_job_cancels_the_job_once_it_completed(spark, tmp_path):
    client = observed_job(tmp_path / "job", "cancelled with a savepoint", checkpoints=1)
    jid = client.get_job_id()
    body = {"target-directory": str(tmp_path / "sp"), "cancel-job": True}
    _, answer = call(f"/jobs/{jid}/savepoints", "POST", body)
    location = operation(f"/jobs/{jid}/savepoints/{answer['request-id']}")["location"]
    assert os.path.isfile(f"{location}/_metadata")
    wait_for_end(client)
    assert client.jobmaster.status.name == "CANCELED"

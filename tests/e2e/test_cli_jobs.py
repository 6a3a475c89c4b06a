"""The commands on running jobs (`tidegate list`, `checkpoints --job`, `cancel`, ...) against a
job running on Spark in this process, through its driver's REST API: in-process with click's
CliRunner, and once as a real `python -m tidegate` subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.e2e.observed import PARALLELISM, observed_job, rest_url, start_observed_job
from tests.support.waiting import resolved, wait_until
from tidegate.cli import cli


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    client = observed_job(tmp_path_factory.mktemp("cli"), "cli jobs job")
    yield client
    resolved(client.cancel(), "the job to be cancelled")


def tidegate(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


def test_list_shows_the_running_job_of_this_driver(job):
    result = tidegate("list")
    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if job.get_job_id() in line)
    assert "cli jobs job" in line and "RUNNING" in line and rest_url() in line
    records = json.loads(tidegate("list", "--json").stdout)
    mine = next(r for r in records if r["jid"] == job.get_job_id())
    assert mine["state"] == "RUNNING" and mine["driver"] == rest_url()


def test_list_runs_as_a_command_in_another_process(job):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-m", "tidegate", "list"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert job.get_job_id() in result.stdout


def test_checkpoints_of_a_job_given_by_an_id_prefix(job):
    prefix = job.get_job_id()[:8]
    result = tidegate("checkpoints", "--job", prefix)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"job {job.get_job_id()} ('cli jobs job', RUNNING)" in out
    assert "latest completed  #" in out and "end-to-end duration  min" in out
    assert "COMPLETED" in out and f"{2 * PARALLELISM}/{2 * PARALLELISM}" in out


def test_one_checkpoint_of_a_job_shows_every_subtask(job):
    latest = job.jobmaster.stats.last_checkpoint.checkpoint_id
    result = tidegate("checkpoints", "--job", job.get_job_id(), "--id", str(latest))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith(f"checkpoint {latest}: COMPLETED")
    for vertex in job.jobmaster.spec.graph.vertices.values():
        assert f"vertex {vertex.vertex_id}: {vertex.name}" in out
    assert "START DELAY MS" in out
    detail = json.loads(
        tidegate("checkpoints", "--job", job.get_job_id(), "--id", str(latest), "--json").stdout
    )
    assert detail["id"] == latest and len(detail["tasks"]) == len(job.jobmaster.spec.graph.vertices)


def test_an_explicit_address_works_and_a_wrong_one_is_a_clear_error(job):
    result = tidegate("list", "--address", rest_url())
    assert result.exit_code == 0 and job.get_job_id() in result.stdout
    result = tidegate("list", "--address", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert "Error: no tidegate driver answers at http://127.0.0.1:9" in result.stderr
    assert "Hint: is the job's driver still running?" in result.stderr
    result = tidegate("cancel", "nope", env={"TIDEGATE_REST_URL": rest_url()})
    assert result.exit_code == 2
    assert "Error: no job 'nope' in any running driver" in result.stderr
    assert "Hint: `tidegate list` shows the jobs" in result.stderr


def test_without_a_running_driver_the_commands_say_so(tmp_path):
    result = tidegate("list", env={"TIDEGATE_HOME": str(tmp_path)})
    assert result.exit_code == 2
    assert "Error: no running tidegate driver found on this machine" in result.stderr
    assert "Hint: start a job" in result.stderr


def test_checkpoints_needs_either_a_directory_or_a_job(tmp_path):
    for args in ((), (str(tmp_path), "--job", "abc")):
        result = tidegate("checkpoints", *args)
        assert result.exit_code == 2
        assert "Error: give either DIR (checkpoints on disk) or --job JOB" in result.stderr


def test_cancel_cancels_the_job_and_waits_for_it(spark, tmp_path):
    client = start_observed_job(tmp_path, "cli cancel")
    wait_until(lambda: client.jobmaster.status.name == "RUNNING", "running", job=client)
    result = tidegate("cancel", client.get_job_id()[:12])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"job {client.get_job_id()} is CANCELED"
    assert client.jobmaster.status.name == "CANCELED"

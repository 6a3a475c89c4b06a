"""The driver's REST API, with real HTTP requests, about jobs running on Spark."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.e2e.jobs import count_job
from tests.e2e.observed import (
    PARALLELISM,
    http,
    observed_job,
    rest_url,
    start_observed_job,
)
from tests.support.waiting import resolved, wait_for_end, wait_until
from tidegate.rest.discovery import running_drivers, write_discovery_file
from tidegate.rest.registry import JobRegistry
from tidegate.rest.routes import RestApi
from tidegate.rest.server import RestSecurityError, RestServer, parse_ports


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    """A job on Spark that completed two checkpoints and reports rates; cancelled afterwards."""
    client = observed_job(tmp_path_factory.mktemp("rest"), "rest api job")
    yield client
    resolved(client.cancel(), "the job to be cancelled")


def get(path: str, **kw):
    status, body, _headers = http(rest_url() + path, **kw)
    return status, body


def test_the_job_list_and_the_job_show_the_running_job(job):
    status, jobs = get("/jobs")
    assert status == 200
    listed = {j["jid"]: j for j in jobs["jobs"]}
    assert listed[job.get_job_id()]["state"] == "RUNNING"
    assert listed[job.get_job_id()]["name"] == "rest api job"
    status, detail = get(f"/jobs/{job.get_job_id()}")
    assert status == 200
    graph = job.jobmaster.spec.graph
    assert [v["name"] for v in detail["vertices"]] == [v.name for v in graph.vertices.values()]
    assert all(v["metrics"]["read-records"] > 0 for v in detail["vertices"])
    assert detail["isStoppable"] and detail["end-time"] == -1
    assert detail["timestamps"]["RUNNING"] >= detail["start-time"]
    assert detail["checkpoints"]["counts"]["completed"] >= 2


def test_the_plan_shows_vertices_operators_and_edges(job):
    _, answer = get(f"/jobs/{job.get_job_id()}/plan")
    plan = answer["plan"]
    graph = job.jobmaster.spec.graph
    assert [n["id"] for n in plan["nodes"]] == list(graph.vertices)
    assert all(n["parallelism"] == PARALLELISM for n in plan["nodes"])
    uids = [op["uid"] for n in plan["nodes"] for op in n["operators"]]
    assert {"numbers", "count", "slow", "sink"} <= set(uids)
    assert [e["ship_strategy"] for e in plan["edges"]] == ["HASH"]  # key_by
    keyed = next(n for n in plan["nodes"] if n["inputs"])
    assert keyed["inputs"][0]["ship_strategy"] == "HASH"


def test_checkpoint_statistics_show_counts_summary_latest_and_history(job):
    _, stats = get(f"/jobs/{job.get_job_id()}/checkpoints")
    counts = stats["counts"]
    assert counts["completed"] >= 2 and counts["total"] >= counts["completed"]
    latest = stats["latest"]["completed"]
    assert latest["status"] == "COMPLETED" and latest["checkpoint_type"] == "CHECKPOINT"
    assert latest["num_acknowledged_subtasks"] == latest["num_subtasks"] == 2 * PARALLELISM
    assert latest["state_size"] > 0 and latest["external_path"].endswith(f"chk-{latest['id']}")
    ids = [h["id"] for h in stats["history"]]
    assert ids == sorted(ids, reverse=True) and latest["id"] in ids
    summary = stats["summary"]["end_to_end_duration"]
    assert 0 <= summary["min"] <= summary["avg"] <= summary["max"]


def test_checkpoint_details_list_every_subtask_with_its_timings(job):
    jid = job.get_job_id()
    _, stats = get(f"/jobs/{jid}/checkpoints")
    cid = stats["latest"]["completed"]["id"]
    status, detail = get(f"/jobs/{jid}/checkpoints/details/{cid}")
    assert status == 200 and detail["id"] == cid
    assert set(detail["tasks"]) == {str(v) for v in job.jobmaster.spec.graph.vertices}
    for task in detail["tasks"].values():
        assert task["num_acknowledged_subtasks"] == PARALLELISM
        for s in task["subtasks"]:
            assert s["status"] == "completed"
            assert s["end_to_end_duration"] >= 0 and s["checkpoint"]["async"] > 0
            assert s["state_size"] > 0 and s["unaligned_checkpoint"] is False
    vertex = next(iter(detail["tasks"].values()))["id"]
    status, one = get(f"/jobs/{jid}/checkpoints/details/{cid}/subtasks/{vertex}")
    assert status == 200 and [s["index"] for s in one["subtasks"]] == list(range(PARALLELISM))
    status, missing = get(f"/jobs/{jid}/checkpoints/details/999999")
    assert status == 404 and "not in the history" in missing["errors"][0]


def test_metrics_show_records_rates_backpressure_and_the_last_checkpoint_age(job):
    _, metrics = get(f"/jobs/{job.get_job_id()}/metrics")
    assert metrics["records-read"] > 0 and metrics["records-in"] > 0
    assert metrics["last-checkpoint-age"] is not None and metrics["last-checkpoint-age"] >= 0
    source = metrics["vertices"][0]
    assert source["name"] == "Source: numbers"
    for subtask in source["subtasks"]:
        assert subtask["rates-known"]
        assert 0 <= subtask["backpressure-ratio"] <= 1 and 0 <= subtask["busy-ratio"] <= 1
        assert subtask["backpressure-level"] in ("ok", "low", "high")
    assert sum(v["metrics"]["read-records-per-second"] for v in metrics["vertices"]) > 0
    status, backpressure = get(f"/jobs/{job.get_job_id()}/vertices/{source['id']}/backpressure")
    assert status == 200 and len(backpressure["subtasks"]) == PARALLELISM


def test_the_configuration_endpoints_show_the_job_settings(job):
    _, config = get(f"/jobs/{job.get_job_id()}/config")
    execution = config["execution-config"]
    assert execution["job-parallelism"] == PARALLELISM and execution["runner"] == "spark"
    assert execution["user-config"]["execution.runner"] == "spark"
    assert "fixed delay" in execution["restart-strategy"]
    _, checkpointing = get(f"/jobs/{job.get_job_id()}/checkpoints/config")
    assert checkpointing["interval"] == 300 and checkpointing["mode"] == "exactly_once"


def test_requests_for_unknown_things_get_json_errors(job):
    status, body = get("/jobs/0123456789abcdef")
    assert status == 404 and "not found" in body["errors"][0]
    status, body = get("/nothing/here")
    assert status == 404 and body["errors"]
    status, body = get(f"/jobs/{job.get_job_id()}/plan", method="POST", body={})
    assert status == 405
    status, body = get(f"/jobs/{job.get_job_id()}/savepoints", method="POST", body=b"{not json")
    assert status == 400 and "not JSON" in body["errors"][0]
    status, body = get(f"/jobs/{job.get_job_id()}?mode=stop", method="PATCH")
    assert status == 400


def test_the_dashboard_files_are_served_with_a_content_security_policy(job):
    status, page, headers = http(rest_url() + "/")
    assert status == 200 and "/web/app.js" in page
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    status, _script, headers = http(rest_url() + "/web/app.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert http(rest_url() + "/web/..%2f__init__.py")[0] == 404


def test_a_loopback_server_refuses_other_hosts_and_cross_site_changes(job):
    url = rest_url()
    status, body, _ = http(url + "/jobs", headers={"Host": "attacker.example:8081"})
    assert status == 403  # DNS rebinding
    path = f"/jobs/{job.get_job_id()}?mode=cancel"
    status, body, _ = http(url + path, "PATCH", headers={"Origin": "http://attacker.example"})
    assert status == 403 and "cross-site" in body["errors"][0]
    assert job.jobmaster.status.name == "RUNNING"


def test_off_loopback_a_token_is_required_and_without_one_the_server_refuses_to_start(job):
    registry = JobRegistry()
    registry.add(job.jobmaster)
    with pytest.raises(RestSecurityError, match="without a token"):
        RestServer(RestApi(registry), "0.0.0.0", [0], token=None)
    server = RestServer(RestApi(registry), "0.0.0.0", [0], token="s3cret-token")
    try:
        url = f"http://127.0.0.1:{server.port}"
        assert http(url + "/jobs")[0] == 401
        assert http(url + "/jobs", headers={"Authorization": "Bearer wrong"})[0] == 401
        status, jobs, _ = http(url + "/jobs", headers={"Authorization": "Bearer s3cret-token"})
        assert status == 200 and [j["jid"] for j in jobs["jobs"]] == [job.get_job_id()]
        assert http(url + "/")[0] == 200  # the dashboard's files hold no data
        assert server.url == url
    finally:
        server.close()


def test_a_taken_port_falls_back_to_the_next_free_one(job):
    first = RestServer(RestApi(JobRegistry()), "127.0.0.1", [0])
    try:
        second = RestServer(RestApi(JobRegistry()), "127.0.0.1", [first.port, *parse_ports("0")])
        assert second.port != first.port
        second.close()
        with pytest.raises(OSError, match="in use"):
            RestServer(RestApi(JobRegistry()), "127.0.0.1", [first.port])
    finally:
        first.close()
    assert parse_ports("8081")[:3] == [8081, 8082, 8083] and len(parse_ports("8081")) == 100
    assert parse_ports("9000-9002,0") == [9000, 9001, 9002, 0]
    with pytest.raises(ValueError, match=r"rest\.port"):
        parse_ports("http")


def test_the_driver_writes_a_private_discovery_file_and_stale_ones_are_removed(job, tmp_path):
    mine = [d for d in running_drivers() if d.pid == os.getpid()]
    assert [d.url for d in mine] == [rest_url()]
    assert stat.S_IMODE(mine[0].path.stat().st_mode) == 0o600
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = mine[0].path.parent / f"{gone.stdout.strip()}.json"
    stale.write_text(f'{{"pid": {gone.stdout.strip()}, "url": "http://127.0.0.1:1"}}')
    assert all(d.path != stale for d in running_drivers())
    assert not stale.exists()


def test_a_discovery_file_of_another_home_is_written_with_its_token(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEGATE_HOME", str(tmp_path / "home"))
    path = write_discovery_file("http://127.0.0.1:9", "tok")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    (driver,) = running_drivers()
    assert (driver.url, driver.token, driver.pid) == ("http://127.0.0.1:9", "tok", os.getpid())
    path.unlink()


def test_cancelling_over_rest_cancels_the_job(spark, tmp_path):
    client = start_observed_job(tmp_path, "to cancel")
    wait_until(lambda: client.jobmaster.status.name == "RUNNING", "running", job=client)
    status, _ = get(f"/jobs/{client.get_job_id()}?mode=cancel", method="PATCH")
    assert status == 202
    wait_for_end(client)
    assert client.jobmaster.status.name == "CANCELED"
    _, detail = get(f"/jobs/{client.get_job_id()}")
    assert detail["state"] == "CANCELED" and detail["end-time"] >= detail["start-time"]


def test_failures_restarts_and_restores_are_in_the_exception_history(spark, tmp_path):
    env = count_job(
        tmp_path / "out", tmp_path / "chk", runner="spark", n=6_000, rate=3_000,
        fail_at={0: 4_000},
    )  # fmt: skip
    client = env.execute_async("fails once")
    resolved(client.get_job_execution_result(), "the job to finish")
    jid = client.get_job_id()
    _, exceptions = get(f"/jobs/{jid}/exceptions")
    (failure,) = exceptions["exceptionHistory"]["entries"]
    assert "injected failure at record 4000" in failure["message"]
    assert failure["attempt"] == 0 and "InjectedFailure" in failure["stacktrace"]
    assert exceptions["restarts"] == 1
    (restore,) = exceptions["restores"]
    assert restore["attempt"] == 1 and restore["external_path"].endswith(f"chk-{restore['id']}")
    _, stats = get(f"/jobs/{jid}/checkpoints")
    assert stats["counts"]["restored"] == 1
    assert stats["latest"]["restored"]["id"] == restore["id"]
    _, detail = get(f"/jobs/{jid}")
    assert detail["state"] == "FINISHED" and detail["restarts"] == 1

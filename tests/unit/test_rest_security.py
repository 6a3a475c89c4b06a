"""The REST server's token (rest/__init__.py, rest/server.py, docs/rest-api.md#security): none on
loopback by default; on any other address the configured `rest.token` or one generated for the
process, required by every API request; the CLI sends it from `--token`, TIDEGATE_REST_TOKEN or
the driver's discovery file. Real HTTP against a real server (with no jobs), no Spark."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.e2e.observed import http
from tidegate.cli import cli
from tidegate.common.configuration import Configuration
from tidegate.rest import rest_settings
from tidegate.rest.client import RestClient, RestClientError
from tidegate.rest.discovery import write_discovery_file
from tidegate.rest.registry import JobRegistry
from tidegate.rest.routes import RestApi
from tidegate.rest.server import RestServer


def settings(**keys: str):
    return rest_settings(Configuration().add_all({f"rest.{k}": v for k, v in keys.items()}))


def serve(s) -> RestServer:
    return RestServer(
        RestApi(JobRegistry()), s.host, [0], s.token, token_generated=s.token_generated
    )


def test_by_default_the_server_is_on_loopback_without_a_token():
    s = settings()
    assert (s.host, s.token, s.token_generated) == ("127.0.0.1", None, False)
    assert s.ports[0] == 8081
    server = serve(s)
    try:
        assert http(f"{server.url}/jobs")[:2] == (200, {"jobs": []})
        assert server.dashboard_url == f"{server.url}/"
    finally:
        server.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.2"])
def test_off_loopback_without_a_configured_token_one_is_generated_per_process(host):
    first, second = settings(**{"bind-address": host}), settings(**{"bind-address": host})
    assert first.token_generated and first.host == host
    assert len(first.token) == 32 and first.token != second.token  # 192 random bits


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_configured_token_is_used_on_any_address(host):
    s = settings(**{"bind-address": host, "token": "configured"})
    assert (s.token, s.token_generated) == ("configured", False)


@pytest.fixture
def guarded(monkeypatch, tmp_path):
    """A server on all interfaces with a generated token; its discovery file in a private
    TIDEGATE_HOME, as a driver writes it."""
    monkeypatch.setenv("TIDEGATE_HOME", str(tmp_path / "home"))
    server = serve(settings(**{"bind-address": "0.0.0.0"}))
    path = write_discovery_file(server.url, server.token)
    yield server
    path.unlink()
    server.close()


def test_no_token_or_a_wrong_one_gets_401_and_the_right_one_200(guarded):
    url, token = f"{guarded.url}/jobs", guarded.token
    assert http(url)[0] == 401
    assert http(url, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert http(url, headers={"Authorization": f"Basic {token}"})[0] == 401
    assert http(url, headers={"Authorization": f"Bearer {token}"})[:2] == (200, {"jobs": []})
    assert guarded.dashboard_url == f"{guarded.url}/#token={token}"  # for who started it
    with pytest.raises(RestClientError) as refused:
        RestClient(guarded.url).get("/jobs")
    assert refused.value.status == 401
    assert RestClient(guarded.url, token).get("/jobs") == {"jobs": []}


def test_the_cli_sends_the_token_from_the_option_the_environment_or_the_discovery_file(guarded):
    def tidegate(*args: str, env: dict[str, str] | None = None):
        return CliRunner().invoke(cli, ["list", *args], env=env)

    address = ["--address", guarded.url]
    wrong = tidegate(*address, "--token", "wrong")
    assert wrong.exit_code == 2 and "--token or TIDEGATE_REST_TOKEN" in wrong.stderr
    assert tidegate(*address, "--token", guarded.token).exit_code == 0
    assert tidegate(*address, env={"TIDEGATE_REST_TOKEN": guarded.token}).exit_code == 0
    assert tidegate(*address).exit_code == 0  # the token of the discovery file for this URL
    assert tidegate().exit_code == 0  # every driver of the discovery files, with its token

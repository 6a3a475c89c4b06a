"""Commands on running jobs, over the drivers' REST API (docs/rest-api.md):

    tidegate list
    tidegate checkpoints --job JOB [--id N]
    tidegate trigger-checkpoint JOB
    tidegate savepoint JOB [DIR]
    tidegate stop JOB [--savepoint DIR] [--drain]
    tidegate cancel JOB

Without `--address` (or `TIDEGATE_REST_URL`) the commands ask every driver running on this
machine (found by their discovery files); JOB is a job id or a unique prefix of one.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import click

from tidegate.cli.errors import EXIT_JOB_FAILED, CliError, reported, verbose_option
from tidegate.cli.formatting import duration, format_table, human_size, local_iso
from tidegate.rest.client import DriverUnreachableError, RestClient, RestClientError
from tidegate.rest.discovery import running_drivers

_TERMINAL = ("FINISHED", "CANCELED", "FAILED")


def address_options(command: Callable) -> Callable:
    """`--address URL` and `--token TOKEN` (and their environment variables)."""
    command = click.option(
        "--token",
        envvar="TIDEGATE_REST_TOKEN",
        metavar="TOKEN",
        help="Bearer token of a driver bound to a non-loopback address (env TIDEGATE_REST_TOKEN; "
        "default: the one in the driver's discovery file).",
    )(command)
    return click.option(
        "--address",
        envvar="TIDEGATE_REST_URL",
        metavar="URL",
        help="REST URL of the driver, e.g. http://127.0.0.1:8081 (env TIDEGATE_REST_URL; "
        "default: every driver running on this machine).",
    )(command)


# drivers and jobs -----------------------------------------------------------------------------
def drivers(address: str | None, token: str | None) -> list[RestClient]:
    """The driver at `address`, or every running driver on this machine."""
    found = running_drivers()
    if address is not None:
        url = address.rstrip("/")
        if "://" not in url:
            url = f"http://{url}"
        known = next((d.token for d in found if d.url == url), None)
        return [RestClient(url, token or known)]
    if not found:
        raise CliError(
            "no running tidegate driver found on this machine",
            "start a job (tidegate run JOB.py), or pass --address URL for a driver elsewhere",
        )
    return [RestClient(d.url, token or d.token) for d in found]


@dataclass(frozen=True)
class _Job:
    client: RestClient
    overview: dict[str, Any]

    @property
    def id(self) -> str:
        return self.overview["jid"]

    @property
    def path(self) -> str:
        return f"/jobs/{self.id}"


def list_jobs(clients: list[RestClient], explicit: bool) -> list[_Job]:
    """The jobs of every driver; unreachable discovered drivers are skipped with a warning."""
    jobs = []
    for client in clients:
        try:
            answer = client.get("/jobs")
        except DriverUnreachableError as e:
            if explicit:
                raise
            click.echo(f"warning: skipped a driver: {e}", err=True)
            continue
        jobs.extend(_Job(client, overview) for overview in answer["jobs"])
    return jobs


def find_job(prefix: str, address: str | None, token: str | None) -> _Job:
    jobs = list_jobs(drivers(address, token), explicit=address is not None)
    exact = [j for j in jobs if j.id == prefix]
    matches = exact or [j for j in jobs if j.id.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CliError(f"no job {prefix!r} in any running driver", "`tidegate list` shows the jobs")
    listed = ", ".join(f"{j.id} ({j.overview['name']})" for j in matches)
    raise CliError(f"job id prefix {prefix!r} is ambiguous: {listed}", "give more of the id")


def _failure(operation: dict[str, Any]) -> str | None:
    cause = operation.get("failure-cause")
    return None if cause is None else f"{cause.get('class')}: {cause.get('message')}"


# commands -------------------------------------------------------------------------------------
@click.command("list")
@address_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@verbose_option
def list_command(address: str | None, token: str | None, as_json: bool, verbose: bool) -> None:
    """List the jobs of the running drivers (running and ended ones)."""
    with _reported(verbose):
        jobs = list_jobs(drivers(address, token), explicit=address is not None)
        if as_json:
            records = [{**j.overview, "driver": j.client.url} for j in jobs]
            click.echo(json.dumps(records, indent=2))
            return
        if not jobs:
            click.echo("no jobs", err=True)
            return
        headers = ["JOB ID", "NAME", "STATUS", "STARTED", "DURATION", "RESTARTS", "DRIVER"]
        rows = [
            [
                j.id,
                j.overview["name"],
                j.overview["state"],
                local_iso(j.overview["start-time"]),
                duration(j.overview["duration"] / 1000),
                j.overview["restarts"],
                j.client.url,
            ]
            for j in jobs
        ]
        click.echo(format_table(headers, rows))


@click.command("trigger-checkpoint")
@click.argument("job", metavar="JOB")
@address_options
@verbose_option
def trigger_checkpoint_command(job: str, address: str | None, token: str | None, verbose: bool):
    """Take a checkpoint of a running job now, and wait for it."""
    with _reported(verbose):
        found = find_job(job, address, token)
        request = found.client.post(f"{found.path}/checkpoints")["request-id"]
        operation = found.client.await_operation(f"{found.path}/checkpoints/{request}")
        _raise_failure(operation, f"checkpoint of job {found.id} failed")
        click.echo(f"checkpoint {operation['checkpointId']} completed: {operation['location']}")


@click.command("savepoint")
@click.argument("job", metavar="JOB")
@click.argument("directory", metavar="[DIR]", required=False)
@address_options
@verbose_option
def savepoint_command(
    job: str, directory: str | None, address: str | None, token: str | None, verbose: bool
) -> None:
    """Take a savepoint of a running job (into a new directory under DIR, default: the job's
    configured savepoint directory), and wait for it. The job keeps running."""
    with _reported(verbose):
        found = find_job(job, address, token)
        answer = found.client.post(f"{found.path}/savepoints", {"target-directory": directory})
        operation = found.client.await_operation(f"{found.path}/savepoints/{answer['request-id']}")
        _raise_failure(operation, f"savepoint of job {found.id} failed")
        click.echo(f"savepoint completed: {operation['location']}")


@click.command("stop")
@click.argument("job", metavar="JOB")
@click.option(
    "--savepoint",
    "directory",
    metavar="DIR",
    help="Directory for the savepoint (default: the job's configured savepoint directory).",
)
@click.option("--drain", is_flag=True, help="Flush everything first, as if the input ended.")
@address_options
@verbose_option
def stop_command(
    job: str,
    directory: str | None,
    drain: bool,
    address: str | None,
    token: str | None,
    verbose: bool,
) -> None:
    """Stop a running job with a savepoint: the sinks commit it and the job finishes."""
    with _reported(verbose):
        found = find_job(job, address, token)
        body = {"targetDirectory": directory, "drain": drain}
        answer = found.client.post(f"{found.path}/stop", body)
        operation = found.client.await_operation(f"{found.path}/savepoints/{answer['request-id']}")
        _raise_failure(operation, f"stopping job {found.id} failed")
        click.echo(f"stopped job {found.id} with savepoint {operation['location']}")


@click.command("cancel")
@click.argument("job", metavar="JOB")
@address_options
@verbose_option
def cancel_command(job: str, address: str | None, token: str | None, verbose: bool) -> None:
    """Cancel a running job, and wait until it ended."""
    with _reported(verbose):
        found = find_job(job, address, token)
        found.client.patch(f"{found.path}?mode=cancel")
        state = found.overview["state"]
        while state not in _TERMINAL:
            time.sleep(0.2)
            state = found.client.get(found.path)["state"]
        click.echo(f"job {found.id} is {state}")


# `tidegate checkpoints --job` -----------------------------------------------------------------
def show_job_checkpoints(
    job: str,
    checkpoint_id: int | None,
    as_json: bool,
    address: str | None,
    token: str | None,
    verbose: bool,
) -> None:
    """The checkpoint statistics of a running job, or one checkpoint's per-subtask details."""
    with _reported(verbose):
        found = find_job(job, address, token)
        if checkpoint_id is not None:
            detail = found.client.get(f"{found.path}/checkpoints/details/{checkpoint_id}")
            click.echo(json.dumps(detail, indent=2) if as_json else _format_detail(detail))
            return
        stats = found.client.get(f"{found.path}/checkpoints")
        click.echo(json.dumps(stats, indent=2) if as_json else _format_stats(found, stats))


def _format_stats(job: _Job, stats: dict[str, Any]) -> str:
    c = stats["counts"]
    lines = [
        f"job {job.id} ({job.overview['name']!r}, {job.overview['state']}): "
        f"{c['total']} triggered, {c['completed']} completed, {c['failed']} failed, "
        f"{c['in_progress']} in progress, {c['restored']} restores",
        *_summary_lines(stats["summary"]),
        *_latest_lines(stats["latest"]),
    ]
    headers = ["ID", "STATUS", "TYPE", "TRIGGERED", "DURATION MS", "STATE", "IN-FLIGHT", "ACKED"]
    rows = [
        [
            h["id"],
            h["status"],
            h["checkpoint_type"],
            local_iso(h["trigger_timestamp"]),
            h["end_to_end_duration"],
            human_size(h["state_size"]),
            human_size(h["persisted_data"]),
            f"{h['num_acknowledged_subtasks']}/{h['num_subtasks']}",
        ]
        for h in stats["history"]
    ]
    return "\n".join([*lines, "", format_table(headers, rows)]) if rows else "\n".join(lines)


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    """min / avg / max of durations and sizes over the completed checkpoints."""
    lines = []
    for name, key, show in (
        ("end-to-end duration", "end_to_end_duration", lambda v: f"{v:.0f} ms"),
        ("state size", "state_size", human_size),
        ("in-flight data", "persisted_data", human_size),
    ):
        s = summary[key]
        if s["avg"] is not None:
            lines.append(
                f"  {name:<20} min {show(s['min'])}, avg {show(s['avg'])}, max {show(s['max'])}"
            )
    return lines


def _latest_lines(latest: dict[str, Any]) -> list[str]:
    """The latest completed checkpoint, savepoint, failed checkpoint and restore."""
    lines = []
    for name in ("completed", "savepoint", "failed"):
        cp = latest[name]
        if cp is None:
            lines.append(f"  latest {name:<10} -")
            continue
        text = f"#{cp['id']} triggered {local_iso(cp['trigger_timestamp'])}"
        if name == "failed":
            text += f": {cp['failure_message']}"
        else:
            text += f", {cp['end_to_end_duration']} ms, {human_size(cp['state_size'])}"
            text += f", {cp['external_path']}"
        lines.append(f"  latest {name:<10} {text}")
    restored = latest["restored"]
    if restored is None:
        lines.append(f"  latest {'restored':<10} -")
    else:
        lines.append(
            f"  latest {'restored':<10} #{restored['id']} at "
            f"{local_iso(restored['restore_timestamp'])} from {restored['external_path']}"
        )
    return lines


def _format_detail(detail: dict[str, Any]) -> str:
    lines = [
        f"{detail['checkpoint_type'].lower()} {detail['id']}: {detail['status']}, triggered "
        f"{local_iso(detail['trigger_timestamp'])}, {detail['end_to_end_duration']} ms, "
        f"{human_size(detail['state_size'])} state, {human_size(detail['persisted_data'])} "
        f"in flight, {detail['num_acknowledged_subtasks']}/{detail['num_subtasks']} acknowledged"
    ]
    if detail["external_path"]:
        lines.append(f"  path {detail['external_path']}")
    if detail["failure_message"]:
        lines.append(f"  failure: {detail['failure_message']}")
    headers = ["SUBTASK", "ACK", "E2E MS", "SYNC MS", "ASYNC MS", "ALIGN MS", "START DELAY MS"]
    headers += ["STATE", "IN-FLIGHT", "UNALIGNED"]
    for task in detail["tasks"].values():
        lines.append(f"\nvertex {task['id']}: {task['name']}")
        rows = []
        for s in task["subtasks"]:
            if "ack_timestamp" not in s:
                rows.append([s["index"], "-", "-", "-", "-", "-", "-", "-", "-", "-"])
                continue
            rows.append(
                [
                    s["index"],
                    local_iso(s["ack_timestamp"]),
                    s["end_to_end_duration"],
                    s["checkpoint"]["sync"],
                    s["checkpoint"]["async"],
                    s["alignment"]["duration"],
                    s["start_delay"],
                    human_size(s["state_size"]),
                    human_size(s["persisted_data"]),
                    "yes" if s["unaligned_checkpoint"] else "no",
                ]
            )
        lines.append(format_table(headers, rows, indent="  "))
    return "\n".join(lines)


def _raise_failure(operation: dict[str, Any], what: str) -> None:
    failure = _failure(operation)
    if failure is not None:
        raise CliError(f"{what}: {failure}", None, EXIT_JOB_FAILED)


@contextlib.contextmanager
def _reported(verbose: bool) -> Iterator[None]:
    """`reported` (path and internal errors), plus the REST client's errors."""
    with reported(verbose):
        try:
            yield
        except DriverUnreachableError as e:
            hint = "is the job's driver still running? `tidegate list` shows the running drivers"
            raise CliError(str(e), hint) from None
        except RestClientError as e:
            hint = None
            if e.status == 401:
                hint = "pass the driver's token with --token or TIDEGATE_REST_TOKEN"
            raise CliError(f"the driver answered: {e}", hint) from None

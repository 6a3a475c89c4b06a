"""`tidegate check-restore`: the pre-flight restore check, on real savepoints of a small job
(local runner) and the job script of tests/e2e/restore_check_job.py changed by its switches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.e2e.restore_check_job import build_job
from tests.support.snapshots import stop_with_savepoint
from tidegate.checkpoint.metadata import canonical_json
from tidegate.cli import cli
from tidegate.state.checksums import checksum_of

JOB = str(Path(__file__).with_name("restore_check_job.py"))


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory) -> str:
    """A savepoint of the job (parallelism 2, max parallelism 128, with the tagger)."""
    tmp = tmp_path_factory.mktemp("savepoint")
    env = build_job(str(tmp / "out"), str(tmp / "chk"))
    client = env.execute_async("to check")
    path = stop_with_savepoint(client, tmp / "savepoints")
    return path


def check(*args: str) -> Result:
    return CliRunner().invoke(cli, ["check-restore", JOB, *args], catch_exceptions=False)


def check_json(*args: str) -> tuple[int, dict]:
    result = check(*args[:2], "--json", *args[2:])
    return result.exit_code, json.loads(result.stdout)


def by_uid(report: dict) -> dict[str, dict]:
    return {item["uid"]: item for item in report["operators"]}


def test_an_unchanged_job_restores_every_operator_and_reports_its_state(savepoint):
    code, report = check_json("--from", savepoint)

    assert code == 0 and report["ok"] and report["problems"] == []
    ops = by_uid(report)
    assert {uid: op["status"] for uid, op in ops.items()} == {
        "numbers": "restored",
        "count": "restored",
        "tagger": "restored",
        "sink": "restored",
    }
    count = ops["count"]
    assert [(s["name"], s["scope"], s["kind"], s["declared"]) for s in count["states"]] == [
        ("count", "keyed", "value", True)
    ]
    assert count["key_groups"] > 0 and count["bytes"] > 0
    assert [d["key_groups"] for d in count["distribution"]] == ["[0, 63]", "[64, 127]"]
    assert sum(d["bytes"] for d in count["distribution"]) == count["bytes"]
    assert [(s["name"], s["kind"]) for s in ops["tagger"]["states"]] == [("tagged", "split")]


def test_the_table_shows_every_operator_and_the_verdict(savepoint):
    result = check("--from", savepoint)

    assert result.exit_code == 0
    assert "restore would succeed" in result.stdout
    for uid in ("numbers", "count", "tagger", "sink"):
        assert uid in result.stdout
    assert "key groups by new subtask: 0: [0, 63]" in result.stdout


def test_a_rescaled_restore_shows_how_the_key_groups_are_spread(savepoint):
    code, report = check_json("--from", savepoint, "--parallelism", "3")

    assert code == 0
    count = by_uid(report)["count"]
    assert (count["old_parallelism"], count["new_parallelism"]) == (2, 3)
    assert [d["key_groups"] for d in count["distribution"]] == ["[0, 42]", "[43, 85]", "[86, 127]"]
    assert [d["files"] for d in count["distribution"]] == [1, 2, 1]


def test_pending_sink_transactions_are_listed_with_their_checkpoint(savepoint):
    metadata = json.loads((Path(savepoint) / "_metadata").read_text())
    code, report = check_json("--from", savepoint)

    pending = by_uid(report)["sink"]["pending_transactions"]
    assert code == 0 and pending
    assert {t["checkpoint_id"] for t in pending} <= {metadata["checkpoint_id"]}
    assert "will be committed on restore" in check("--from", savepoint).stdout


def test_a_new_operator_is_new_and_the_restore_succeeds(tmp_path):
    env = build_job(str(tmp_path / "out"), str(tmp_path / "chk"), tagger=False)
    client = env.execute_async("without tagger")
    path = stop_with_savepoint(client, str(tmp_path / "sp"))

    code, report = check_json("--from", path)

    assert code == 0
    tagger = by_uid(report)["tagger"]
    assert tagger["status"] == "new"
    assert [(s["name"], s["in_snapshot"], s["declared"]) for s in tagger["states"]] == [
        ("tagged", False, True)
    ]


def test_a_removed_operator_is_dropped_and_refused_unless_allowed(savepoint):
    code, report = check_json("--from", savepoint, "--", "--no-tagger")
    assert code == 1 and not report["ok"]
    assert by_uid(report)["tagger"]["status"] == "dropped"
    assert any("tagger" in p and "allow-non-restored-state" in p for p in report["problems"])

    code, report = check_json(
        "--from", savepoint, "--allow-non-restored-state", "--", "--no-tagger"
    )
    assert code == 0 and by_uid(report)["tagger"]["status"] == "dropped"


def test_a_changed_max_parallelism_is_refused(savepoint):
    code, report = check_json("--from", savepoint, "--", "--max-parallelism", "64")

    assert code == 1
    assert by_uid(report)["count"]["status"] == "refused"
    assert any("max parallelism 64 differs" in p for p in report["problems"])


def test_a_parallelism_above_the_max_parallelism_is_refused(savepoint):
    code, report = check_json(
        "--from", savepoint, "--parallelism", "200", "--", "--no-max-parallelism"
    )

    assert code == 1
    assert by_uid(report)["count"]["status"] == "refused"
    assert any("parallelism 200" in p and "at most 128" in p for p in report["problems"])


def test_a_state_name_registered_with_another_kind_is_refused(savepoint):
    code, report = check_json("--from", savepoint, "--", "--kind", "list")

    assert code == 1
    count = by_uid(report)["count"]
    assert count["status"] == "refused"
    assert any("'count' is restored as value state" in r for r in count["reasons"])


def test_an_exception_in_open_is_reported_not_raised(savepoint):
    code, report = check_json("--from", savepoint, "--", "--fail-open")

    assert code == 0
    warnings = by_uid(report)["count"]["warnings"]
    assert any("ConnectionError" in w and "lookup service" in w for w in warnings)


def test_an_unknown_format_version_is_refused(savepoint, tmp_path):
    copy = tmp_path / "future"
    shutil.copytree(savepoint, copy)
    document = json.loads((copy / "_metadata").read_text())
    document.pop("checksum")
    document["version"] = 99
    document["checksum"] = checksum_of(canonical_json(document))
    (copy / "_metadata").write_text(json.dumps(document))

    code, report = check_json("--from", str(copy))

    assert code == 1 and any("version 99" in p for p in report["problems"])


def test_in_flight_records_into_a_changed_topology_are_refused(savepoint, tmp_path):
    from tests.e2e.test_rewrite_savepoint import add_in_flight_records

    copy = tmp_path / "unaligned"
    shutil.copytree(savepoint, copy)
    add_in_flight_records(copy)

    code, report = check_json("--from", str(copy), "--parallelism", "3")

    assert code == 1
    count = by_uid(report)["count"]
    assert count["status"] == "refused"
    assert any(
        "in-flight records" in r and "parallelism or inputs changed" in r for r in count["reasons"]
    )


def test_verify_refuses_a_missing_or_damaged_state_file(savepoint, tmp_path):
    copy = tmp_path / "damaged"
    shutil.copytree(savepoint, copy)
    count_file = next(copy.glob("count-0-*"))
    data = bytearray(count_file.read_bytes())
    data[20] ^= 0xFF
    count_file.write_bytes(bytes(data))
    next(copy.glob("tagger-1-*")).unlink()

    assert check("--from", str(copy)).exit_code == 1  # the missing file: unreadable state
    code, report = check_json("--from", str(copy), "--verify")

    assert code == 1
    ops = by_uid(report)
    assert ops["count"]["status"] == "refused"
    assert any("checksum" in r for r in ops["count"]["reasons"])
    assert ops["tagger"]["status"] == "refused"


def test_usage_errors_exit_2_with_a_hint(savepoint, tmp_path):
    missing = CliRunner().invoke(
        cli, ["check-restore", str(tmp_path / "nope.py"), "--from", savepoint]
    )
    assert missing.exit_code == 2 and "does not exist" in missing.stderr

    no_path = check()
    assert no_path.exit_code == 2 and "Hint: pass the savepoint" in no_path.stderr

    bad_path = check("--from", str(tmp_path / "no-such-savepoint"))
    assert bad_path.exit_code == 2 and "Error:" in bad_path.stderr

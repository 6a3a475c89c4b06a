"""`tidegate rewrite-savepoint` / `rewrite_max_parallelism`: a savepoint of a job at max
parallelism 128 rewritten to 13 and to 1024 key groups, restored at other parallelisms (on
Spark) exactly once, every key on the subtask the key-group formula predicts; and the refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner

from tests.e2e.restore_check_job import build_job
from tests.support.output import committed_lines
from tests.support.references import check_exactly_once
from tests.support.snapshots import edit_metadata, fingerprint, stop_with_savepoint
from tidegate.checkpoint.rewrite import RewriteError, rewrite_max_parallelism
from tidegate.cli import cli
from tidegate.common.job_client import JobExecutionException
from tidegate.state.channel_state import write_channel_state
from tidegate.state.keygroups import stable_hash, subtask_for_key_group
from tidegate.state.snapshot_format import StateFileIndex, read_key_groups

N = 3_000
JOB = str(Path(__file__).with_name("restore_check_job.py"))


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> tuple[str, list[str]]:
    """A savepoint of the job at parallelism 2, max parallelism 128, and the output so far."""
    tmp = tmp_path_factory.mktemp("original")
    env = build_job(str(tmp / "out"), str(tmp / "chk"), n=N, rate=3_000)
    client = env.execute_async("max parallelism 128")
    path = stop_with_savepoint(client, tmp / "savepoints")
    return path, committed_lines(tmp / "out")


def keyed_entries(path: str, uid: str = "count") -> list[tuple[int, range, int, object, object]]:
    """(subtask, its key-group range, key group, key, value) of every keyed entry of `uid`."""
    metadata = json.loads((Path(path) / "_metadata").read_text())
    found = []
    for subtask, handle in metadata["operators"][uid]["subtasks"].items():
        index = StateFileIndex.from_json(handle["index"])
        owned = range(*handle["key_group_range"])
        with fsspec.open(f"{path}/{handle['file']}", "rb") as f:
            for kg, data in read_key_groups(f, index, owned):
                for _name, (_kind, table) in data.items():
                    found.extend((int(subtask), owned, kg, k, v) for k, v in table.items())
    return found


def check_placement(path: str, max_parallelism: int, parallelism: int) -> None:
    """Every key of `path` is in its key group under `max_parallelism`, in the file of the
    subtask that owns that key group at `parallelism`."""
    metadata = json.loads((Path(path) / "_metadata").read_text())
    assert metadata["max_parallelism"] == max_parallelism
    entries = keyed_entries(path)
    assert entries
    for subtask, owned, kg, key, _value in entries:
        assert kg == stable_hash(key) % max_parallelism and kg in owned
        assert subtask_for_key_group(kg, parallelism, max_parallelism) == subtask


@pytest.mark.parametrize(("max_parallelism", "parallelism"), [(13, None), (1024, None), (13, 4)])
def test_a_rewrite_rehashes_every_key_into_its_key_group_under_the_new_max_parallelism(
    original, tmp_path, max_parallelism, parallelism
):
    source, _ = original
    before = fingerprint(source)
    target = str(tmp_path / "rewritten")

    result = rewrite_max_parallelism(source, target, max_parallelism, parallelism)

    assert fingerprint(source) == before  # the source is never modified
    p = parallelism or 2
    assert result.keyed_operators == {"count": p}
    assert sorted(result.copied_operators) == ["numbers", "sink", "tagger"]
    check_placement(target, max_parallelism, p)
    old = sorted((k, v) for *_, k, v in keyed_entries(source))
    assert sorted((k, v) for *_, k, v in keyed_entries(target)) == old
    assert result.keys == len(old)
    metadata = json.loads((Path(target) / "_metadata").read_text())
    assert metadata["is_savepoint"] and metadata["rewritten_from"]["max_parallelism"] == 128
    files = {h["file"] for op in metadata["operators"].values() for h in op["subtasks"].values()}
    assert {p.name for p in Path(target).iterdir()} == files | {"_metadata"}  # self-contained


def test_restoring_rewritten_savepoints_on_spark_is_exactly_once_with_keys_where_predicted(
    spark, original, tmp_path
):
    source, first = original
    for max_parallelism, parallelism in ((13, 3), (1024, 4)):
        run = tmp_path / f"m{max_parallelism}"
        rewritten = str(run / "rewritten")
        rewrite_max_parallelism(source, rewritten, max_parallelism)
        # the job restores at another parallelism on Spark, with the new max parallelism...
        env = build_job(
            str(run / "out2"),
            str(run / "chk"),
            runner="spark",
            n=N,
            rate=3_000,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            config={"execution.savepoint.path": rewritten},
        )
        client = env.execute_async("rewritten")
        second_savepoint = stop_with_savepoint(client, str(run / "sp"))
        # ...its own savepoint has every key on the subtask the formula predicts...
        check_placement(second_savepoint, max_parallelism, parallelism)
        # ...check-restore accepts it for the last run (a snapshot written on Spark)...
        args = ["--from", second_savepoint, "--json", "--", "--no-max-parallelism"]
        checked = CliRunner().invoke(cli, ["check-restore", JOB, *args])
        assert checked.exit_code == 0, checked.output
        count = next(o for o in json.loads(checked.stdout)["operators"] if o["uid"] == "count")
        assert count["status"] == "restored" and count["old_parallelism"] == parallelism
        assert count["distribution"][-1]["key_groups"].endswith(f", {max_parallelism - 1}]")
        # ...and a last run (max parallelism unset: the snapshot's) finishes the input
        env = build_job(
            str(run / "out3"),
            str(run / "chk"),
            n=N,
            rate=None,
            parallelism=2,
            max_parallelism=None,
            config={"execution.savepoint.path": second_savepoint},
        )
        env.execute("finish")
        second, third = committed_lines(run / "out2"), committed_lines(run / "out3")
        assert second and third
        check_exactly_once(first + second + third, N, 2)


def test_restoring_a_rewritten_savepoint_with_the_old_max_parallelism_fails_clearly(
    original, tmp_path
):
    source, _ = original
    rewritten = str(tmp_path / "rewritten")
    rewrite_max_parallelism(source, rewritten, 13)
    env = build_job(
        str(tmp_path / "out"),
        str(tmp_path / "chk"),
        max_parallelism=128,
        config={"execution.savepoint.path": rewritten},
    )
    with pytest.raises(JobExecutionException) as failure:
        env.execute("old max parallelism")
    message = str(failure.value) + str(failure.value.detail or "")
    assert "max parallelism 128 differs from the snapshot's 13" in message


def test_refusals_name_the_problem_and_write_nothing(original, tmp_path):
    source, _ = original
    target = tmp_path / "target"
    cases = {
        "in [1, 32768]": (0, None),
        "in [1, 32768], got 40000": (40_000, None),
        "parallelism 20 is above the new max parallelism 13": (13, 20),
    }
    for message, (m, p) in cases.items():
        with pytest.raises(RewriteError, match=message.replace("[", r"\[").replace("]", r"\]")):
            rewrite_max_parallelism(source, str(target), m, p)
        assert not target.exists()
    target.mkdir()
    (target / "something").write_text("x")
    with pytest.raises(RewriteError, match="exists and is not an empty directory"):
        rewrite_max_parallelism(source, str(target), 13)
    assert [p.name for p in target.iterdir()] == ["something"]


def test_an_incremental_checkpoint_is_refused_take_a_savepoint_first(original, tmp_path):
    source, _ = original
    copy = tmp_path / "incremental"
    shutil.copytree(source, copy)

    def make_incremental(document):
        handle = document["operators"]["count"]["subtasks"]["0"]
        # what an incremental rocksdb checkpoint records (docs/checkpoint-format.md)
        handle["incremental"] = {
            "version": 1,
            "backend_id": "b",
            "base_checkpoint_id": None,
            "max_parallelism": 128,
            "key_group_range": handle["key_group_range"],
            "state_kinds": {"count": "value"},
            "shared": [{"name": "000012.sst", "file": "../shared/count-0-000012.sst", "size": 10}],
            "private": [],
        }

    edit_metadata(copy, make_incremental)
    with pytest.raises(RewriteError, match=r"type 'incremental'.*Take a savepoint first"):
        rewrite_max_parallelism(str(copy), str(tmp_path / "out"), 13)
    assert not (tmp_path / "out").exists()


def test_an_unaligned_checkpoint_with_in_flight_records_is_refused(original, tmp_path):
    source, _ = original
    copy = tmp_path / "unaligned"
    shutil.copytree(source, copy)
    add_in_flight_records(copy)
    with pytest.raises(RewriteError, match="in-flight records"):
        rewrite_max_parallelism(str(copy), str(tmp_path / "out"), 13)


def add_in_flight_records(path: Path) -> None:
    """Give the snapshot in `path` an unaligned checkpoint's channel state for `count` (a real
    channel-state file, recorded in `_metadata` as the JobMaster records it)."""
    import pickle

    from tidegate.state.checksums import ChecksummingWriter

    name = "channels-count-0-0123456789ab.inflight"
    with ChecksummingWriter(open(path / name, "wb"), name) as f:
        write_channel_state(f, [pickle.dumps((0, [5, 18]))])

    def add(document):
        subtasks = {"0": {"file": f.name, "size": f.size, "checksum": f.checksum, "frames": 1}}
        entry = {"parallelism": 2, "subtasks": subtasks, "inputs": [[0, 0], [0, 1]]}
        document["channel_state"] = {"count": entry}

    edit_metadata(path, add)


def test_the_command_reports_the_rewrite_and_errors_with_exit_codes(original, tmp_path):
    source, _ = original
    runner = CliRunner()
    target = str(tmp_path / "cli")
    args = ["rewrite-savepoint", source, "--max-parallelism", "13", "--output", target, "--json"]
    result = runner.invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["max_parallelism"] == 13 and report["old_max_parallelism"] == 128
    assert report["path"] == target and report["keyed_operators"] == {"count": 2}

    again = runner.invoke(cli, args, catch_exceptions=False)
    assert again.exit_code == 2
    assert "Error: the destination" in again.stderr and "Hint:" in again.stderr
    bad = runner.invoke(cli, ["rewrite-savepoint", source, "-m", "0", "-o", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "Error: the new max parallelism" in bad.stderr

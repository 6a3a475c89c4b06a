"""Filesystem options from configuration keys (common/filesystems.py): Flink's S3 keys and
`fs.<protocol>.<option>` become fsspec storage options for the URLs of that protocol, and
secrets are never shown."""

from __future__ import annotations

import pickle

import pytest
from fsspec.implementations.local import LocalFileSystem

from tidegate.common.configuration import HIDDEN, Configuration, redacted
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.common.serialization import Encoder
from tidegate.connectors.file_sink import FileSink
from tidegate.connectors.file_source import FileSource, StreamFormat
from tidegate.datastream import StreamExecutionEnvironment


def _filesystems(entries: dict[str, str]) -> FileSystems:
    return FileSystems.from_configuration(Configuration().add_all(entries))


def test_flinks_s3_keys_become_s3fs_options_for_s3_and_s3a_urls_only():
    filesystems = FileSystems.from_configuration(
        Configuration()
        .set_string("s3.endpoint", "http://127.0.0.1:8333")
        .set_string("s3.access-key", "0123")
        .set_string("s3.secret-key", "true")
        .set_string("s3.path.style.access", "true")
    )
    expected = {
        "endpoint_url": "http://127.0.0.1:8333",
        "key": "0123",  # Flink's keys stay strings, whatever they look like
        "secret": "true",
        "config_kwargs": {"s3": {"addressing_style": "path"}},
        "use_listings_cache": False,
    }
    assert filesystems.storage_options("s3://bucket/chk") == expected
    assert filesystems.storage_options("s3a://bucket/chk") == expected
    assert filesystems.storage_options("gs://bucket/chk") == {}
    assert filesystems.storage_options("/tmp/chk") == {}


def test_path_style_access_false_asks_for_virtual_host_addressing():
    options = _filesystems({"s3.path.style.access": "false"}).storage_options("s3://b/k")
    assert options["config_kwargs"] == {"s3": {"addressing_style": "virtual"}}


def test_fs_protocol_option_keys_are_typed_and_reach_that_protocol_and_its_aliases():
    filesystems = _filesystems(
        {
            "fs.gs.requester_pays": "TRUE",
            "fs.gs.timeout": "30",
            "fs.gcs.block_size": "1.5e6",
            "fs.gs.project": "0042",
            "fs.gs.token": "anon",
            "fs.s3.use_listings_cache": "true",
        }
    )
    assert filesystems.storage_options("gcs://bucket/x") == {
        "requester_pays": True,
        "timeout": 30,
        "block_size": 1.5e6,
        "project": "0042",  # a leading zero: not a number
        "token": "anon",
    }
    assert filesystems.storage_options("s3://b/x") == {"use_listings_cache": True}


def test_keys_under_fs_that_are_no_storage_option_are_ignored_like_other_unknown_keys():
    filesystems = _filesystems({"fs.default-scheme": "hdfs://nn", "fs.s3.limit.total": "4"})
    assert filesystems == NO_OPTIONS


def test_one_option_given_by_two_keys_is_refused_naming_both():
    with pytest.raises(ValueError) as refused:
        _filesystems({"s3.endpoint": "http://a", "fs.s3.endpoint_url": "http://b"})
    assert "keys 'fs.s3.endpoint_url' and 's3.endpoint' both set" in str(refused.value)


def test_a_local_path_resolves_with_the_file_protocols_options(tmp_path):
    fs, path = _filesystems({"fs.file.auto_mkdir": "true"}).resolve(str(tmp_path / "a" / "b"))
    assert isinstance(fs, LocalFileSystem) and fs.auto_mkdir
    assert path == str(tmp_path / "a" / "b")
    with _filesystems({"fs.file.auto_mkdir": "true"}).open(f"{tmp_path}/new/dir/f", "wb") as f:
        f.write(b"x")
    assert (tmp_path / "new" / "dir" / "f").read_bytes() == b"x"


def test_options_given_for_urls_apply_to_their_protocols():
    filesystems = FileSystems.for_urls({"anon": True}, "s3://b/savepoint", "/tmp/target")
    assert filesystems.storage_options("s3://b/other") == {
        "use_listings_cache": False,
        "anon": True,
    }
    assert filesystems.storage_options("file:///tmp/x") == {"anon": True}
    assert filesystems.storage_options("gs://b") == {}


def test_secrets_are_never_shown_but_the_options_travel_with_the_job():
    filesystems = _filesystems({"s3.secret-key": "s3cr3t-value", "fs.s3.token": "t0ken-value"})
    shown = repr(filesystems) + repr(
        Configuration().set_string("s3.secret-key", "s3cr3t-value").set_string("rest.token", "t")
    )
    assert "s3cr3t-value" not in shown and "t0ken-value" not in shown
    assert "secret" in shown  # the option's name is shown
    assert pickle.loads(pickle.dumps(filesystems)) == filesystems
    assert redacted({"s3.access-key": "id", "s3.endpoint": "http://e", "rest.token": "t"}) == {
        "s3.access-key": HIDDEN,
        "s3.endpoint": "http://e",
        "rest.token": HIDDEN,
    }


def test_the_keys_reach_a_jobs_sinks_sources_and_checkpoint_storage_pickled_with_it(tmp_path):
    (tmp_path / "in.txt").write_text("a\n")
    conf = Configuration().set_string("fs.file.auto_mkdir", "true")
    conf.set_string("s3.endpoint", "http://127.0.0.1:1")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    source = FileSource.for_record_stream_format(
        StreamFormat.text_line_format(), str(tmp_path / "in.txt")
    ).build()
    env.from_source(source, None, "in").sink_to(
        FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    )
    spec = env._job_spec("options")
    expected = FileSystems.from_configuration(conf)
    assert spec.filesystems == expected
    graph = pickle.loads(pickle.dumps(spec.graph))  # as the slots receive it
    connectors = [op.connector for v in graph.vertices.values() for op in v.operators]
    read, sink = connectors
    assert isinstance(sink, FileSink) and isinstance(read, FileSource)
    assert sink.filesystems == read.filesystems == expected
    writer = sink.create_writer(0, 1, 0)
    assert writer._fs.auto_mkdir  # the local filesystem as the keys configured it


def test_a_job_spec_shows_no_secret_of_its_configuration(tmp_path):
    conf = Configuration().set_string("s3.secret-key", "s3cr3t-value")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.from_source(
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build(),
        None,
        "in",
    ).print()
    spec = env._job_spec("secret")
    assert spec.configuration["s3.secret-key"] == "s3cr3t-value"  # it reaches the job
    assert "s3cr3t-value" not in repr(spec)

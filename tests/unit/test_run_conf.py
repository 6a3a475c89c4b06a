"""`tidegate run --conf KEY=VALUE`: entries override the script's configuration when its jobs
are submitted; an entry without `=` is a usage error."""

from __future__ import annotations

from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.common import Configuration
from tidegate.datastream import StreamExecutionEnvironment
from tidegate.datastream.connectors.number_seq import NumberSequenceSource


def test_conf_entries_override_the_scripts_configuration(monkeypatch, tmp_path):
    overrides = {"configuration": {"execution.checkpointing.dir": str(tmp_path / "cli")}}
    monkeypatch.setattr(StreamExecutionEnvironment, "cli_overrides", overrides)
    env = StreamExecutionEnvironment.get_execution_environment(
        Configuration().set_string("execution.checkpointing.dir", str(tmp_path / "script"))
    )
    env.from_source(NumberSequenceSource(0, 1), None, "n").print()
    spec = env._job_spec("conf")
    assert spec.checkpoint.storage == str(tmp_path / "cli")
    assert spec.configuration["execution.checkpointing.dir"] == str(tmp_path / "cli")


def test_a_conf_entry_without_a_value_is_a_usage_error(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('never runs')\n")
    result = CliRunner().invoke(cli, ["run", "--conf", "no-equals-sign", str(script)])
    assert result.exit_code == 2
    assert "'no-equals-sign' is not KEY=VALUE" in result.output

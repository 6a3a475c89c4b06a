"""PyFlink's `ExecutionConfig` (`pyflink.common.ExecutionConfig`): what `env.get_config()`
returns — a view of the environment's settings under PyFlink's method names, each stored under
its Flink configuration key in the environment's Configuration, so that setting it here, by
`configure(...)` or by a Configuration given at creation is one and the same:

* `set/get_auto_watermark_interval` — `pipeline.auto-watermark-interval`;
* `set/get_parallelism`, `set/get_max_parallelism` — the environment's own;
* `set/get_global_job_parameters` — `pipeline.global-job-parameters` (Flink's `k:v,k2:v2`
  map), read by user functions with `runtime_context.get_job_parameter(key, default)`;
* `enable/disable_auto_generated_uids`, `has_auto_generated_uids_enabled` —
  `pipeline.auto-generate-uids`: when disabled, a job with an operator that has no `uid(...)`
  is refused at submission, naming the operators (a job whose savepoints must survive
  changes to the program).
"""

from __future__ import annotations

from typing import Any

from tidegate.common.configuration import Configuration

__all__ = ["ExecutionConfig"]

AUTO_WATERMARK_INTERVAL = "pipeline.auto-watermark-interval"
DEFAULT_AUTO_WATERMARK_INTERVAL_MS = 200
GLOBAL_JOB_PARAMETERS = "pipeline.global-job-parameters"
AUTO_GENERATE_UIDS = "pipeline.auto-generate-uids"


def job_parameters(config: Configuration) -> dict[str, str]:
    """`pipeline.global-job-parameters` as a dict (Flink's map syntax `k1:v1,k2:v2`; a value
    holding `,` or `:` is quoted with single quotes, `''` escaping a quote)."""
    text = config.get_string(GLOBAL_JOB_PARAMETERS)
    if not text:
        return {}
    out = {}
    for entry in _split(text, ","):
        key, sep, value = _partition(entry)
        if not sep:
            raise ValueError(
                f"configuration {GLOBAL_JOB_PARAMETERS!r}: entry {entry!r} is not key:value "
                "(write k1:v1,k2:v2; quote a key or value holding ',' or ':' in single quotes)"
            )
        out[_unquote(key.strip())] = _unquote(value.strip())
    return out


def _split(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside single quotes."""
    parts, current, quoted = [], [], False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _partition(entry: str) -> tuple[str, str, str]:
    parts = _split(entry, ":")
    if len(parts) < 2:
        return entry, "", ""
    return parts[0], ":", ":".join(parts[1:])


def _quote(text: str) -> str:
    if any(c in text for c in ",:'"):
        return "'" + text.replace("'", "''") + "'"
    return text


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    return text


def auto_watermark_interval(config: Configuration) -> int:
    """Milliseconds between periodic watermarks in `config` (default 200). Operators get
    `partial(auto_watermark_interval, config)`, read when the job is submitted."""
    return config.get_duration_ms(AUTO_WATERMARK_INTERVAL, DEFAULT_AUTO_WATERMARK_INTERVAL_MS)


class ExecutionConfig:
    """`env.get_config()`: the environment's execution settings (see the module docstring)."""

    #: `get_parallelism()` never returns these (the environment always has a parallelism);
    #: PyFlink's constants, for programs that compare with them
    PARALLELISM_DEFAULT = -1
    PARALLELISM_UNKNOWN = -2

    def __init__(self, env: Any) -> None:
        self._env = env

    @property
    def _config(self) -> Configuration:
        return self._env._config

    def set_auto_watermark_interval(self, interval: int) -> ExecutionConfig:
        """Milliseconds between periodic watermarks (0 disables them)."""
        if int(interval) < 0:
            raise ValueError(f"the auto-watermark interval must be >= 0 ms, got {interval}")
        self._config.set_string(AUTO_WATERMARK_INTERVAL, f"{int(interval)} ms")
        return self

    def get_auto_watermark_interval(self) -> int:
        """Milliseconds between periodic watermarks (default 200)."""
        return auto_watermark_interval(self._config)

    def set_parallelism(self, parallelism: int) -> ExecutionConfig:
        self._env.set_parallelism(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._env.get_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> ExecutionConfig:
        self._env.set_max_parallelism(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._env.get_max_parallelism()

    def set_global_job_parameters(self, global_job_parameters_dict: dict) -> ExecutionConfig:
        """Parameters every user function reads with `get_job_parameter(key, default)`; keys
        and values are kept as strings (`str(value)`), as in PyFlink. Replaces earlier ones."""
        pairs = (
            f"{_quote(str(k))}:{_quote(str(v))}" for k, v in global_job_parameters_dict.items()
        )
        self._config.set_string(GLOBAL_JOB_PARAMETERS, ",".join(pairs))
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        return job_parameters(self._config)

    def enable_auto_generated_uids(self) -> ExecutionConfig:
        self._config.set_boolean(AUTO_GENERATE_UIDS, True)
        return self

    def disable_auto_generated_uids(self) -> ExecutionConfig:
        """Every operator must then have a `uid(...)`: a job with one that has not is refused
        when it is submitted (its state could not be matched after the program changes)."""
        self._config.set_boolean(AUTO_GENERATE_UIDS, False)
        return self

    def has_auto_generated_uids_enabled(self) -> bool:
        return self._config.get_boolean(AUTO_GENERATE_UIDS, True)

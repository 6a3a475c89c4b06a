"""The filesystems of a job: fsspec storage options by protocol, read from configuration keys
as Flink reads its filesystem settings, and the one way tidegate resolves a path or URL with
them (checkpoint storage, savepoints, restores, file sinks and sources, on every host).

Keys (docs/configuration.md):

- Flink's S3 keys `s3.endpoint`, `s3.access-key`, `s3.secret-key` (strings) and
  `s3.path.style.access` (true/false) become s3fs's `endpoint_url`, `key`, `secret` and
  `config_kwargs={"s3": {"addressing_style": "path" | "virtual"}}`;
- `fs.<protocol>.<option>`: the storage option `<option>` (a keyword argument of the
  filesystem's class) for URLs of `<protocol>` and of its aliases (`s3`/`s3a`, `gs`/`gcs`,
  `file`/`local`); `true`/`false` become booleans, integers and decimals numbers, anything
  else stays a string. Other keys under `fs.` (Flink's `fs.default-scheme`,
  `fs.s3.limit.total`, ...) are not storage options: ignored, like every unknown key.

Credentials the filesystem library finds by itself (AWS_* variables, instance profiles) are
its business, not tidegate's. s3fs's listings cache is off by default: several processes
(driver, slots, attempts in a reused Python worker) write the same directories, and a cached
listing would hide their files (`fs.s3.use_listings_cache=true` turns it back on).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec import AbstractFileSystem
from fsspec.core import OpenFile, split_protocol, url_to_fs
from fsspec.registry import known_implementations

from tidegate.common.configuration import (
    FS_OPTION_PREFIX,
    S3_ACCESS_KEY,
    S3_ENDPOINT,
    S3_PATH_STYLE_ACCESS,
    S3_SECRET_KEY,
    Configuration,
)

#: Flink's S3 keys -> s3fs's storage options (values stay strings)
_S3_KEYS = {S3_ENDPOINT: "endpoint_url", S3_ACCESS_KEY: "key", S3_SECRET_KEY: "secret"}
#: options every filesystem of a protocol gets unless configured otherwise
_DEFAULTS: dict[str, dict[str, Any]] = {"s3": {"use_listings_cache": False}}
_INTEGER = re.compile(r"[+-]?(0|[1-9]\d*)")
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class FileSystems:
    """fsspec storage options by protocol (`"s3"`, `"file"`, ...). Picklable: it travels to
    the slots with the job. Its repr names the options, never their values."""

    by_protocol: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_configuration(cls, conf: Configuration) -> FileSystems:
        """The options the configuration's `s3.*` and `fs.<protocol>.<option>` keys give.
        Raises ValueError for one option given by two keys."""
        options: dict[str, dict[str, Any]] = {}
        given_by: dict[tuple[str, str], str] = {}

        def put(protocol: str, option: str, value: Any, key: str) -> None:
            earlier = given_by.setdefault((protocol, option), key)
            if earlier != key:
                raise ValueError(
                    f"configuration keys {earlier!r} and {key!r} both set the {protocol} "
                    f"storage option {option!r}; keep one of them"
                )
            options.setdefault(protocol, {})[option] = value

        for key, value in sorted(conf.to_dict().items()):
            if key.startswith(FS_OPTION_PREFIX):
                protocol, _, option = key.removeprefix(FS_OPTION_PREFIX).partition(".")
                if protocol and option.isidentifier():
                    put(protocol, option, _typed(value), key)
            elif key in _S3_KEYS:
                put("s3", _S3_KEYS[key], value, key)
        if conf.contains_key(S3_PATH_STYLE_ACCESS):
            style = "path" if conf.get_boolean(S3_PATH_STYLE_ACCESS, False) else "virtual"
            put("s3", "config_kwargs", {"s3": {"addressing_style": style}}, S3_PATH_STYLE_ACCESS)
        return cls(options)

    @classmethod
    def for_urls(cls, options: Mapping[str, Any] | None, *urls: str) -> FileSystems:
        """`options` for the filesystems of `urls` (an API that takes fsspec's storage options
        for the paths it is given, as the state processor does)."""
        return cls({_protocol(url): dict(options or {}) for url in urls})

    def storage_options(self, url: str) -> dict[str, Any]:
        """The storage options for `url` (a local path: protocol `file`): the defaults of its
        protocol, then the options configured for it or any of its aliases."""
        aliases = _aliases(_protocol(url))
        merged: dict[str, Any] = {}
        for protocol in aliases:
            merged.update(_DEFAULTS.get(protocol, {}))
        for protocol in aliases:
            merged.update(self.by_protocol.get(protocol, {}))
        return merged

    def resolve(self, url: str) -> tuple[AbstractFileSystem, str]:
        """The filesystem of `url` with its options, and the path on it."""
        return url_to_fs(url, **self.storage_options(url))

    def open(self, url: str, mode: str = "rb") -> OpenFile:
        """`url` opened with its options (use it in a `with` statement)."""
        return fsspec.open(url, mode, **self.storage_options(url))

    def __repr__(self) -> str:
        named = {p: sorted(options) for p, options in sorted(self.by_protocol.items())}
        return f"FileSystems(options={named})"

    def __hash__(self) -> int:  # by the options' names (what repr shows): equal ones agree
        return hash(repr(self))


#: no options: every filesystem as its library configures it by itself
NO_OPTIONS = FileSystems()


def _protocol(url: str) -> str:
    return split_protocol(url)[0] or "file"


def _aliases(protocol: str) -> list[str]:
    """`protocol` and the other protocols fsspec serves with the same implementation."""
    implementation = known_implementations.get(protocol, {}).get("class")
    if implementation is None:
        return [protocol]
    return sorted(p for p, i in known_implementations.items() if i["class"] == implementation)


def _typed(value: str) -> Any:
    text = value.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if _INTEGER.fullmatch(text):
        return int(text)
    if _DECIMAL.fullmatch(text):
        return float(text)
    return value

"""`OutputTag` (PyFlink's `pyflink.datastream.output_tag`): names a side output."""

from __future__ import annotations

from typing import Any

__all__ = ["OutputTag"]


class OutputTag:
    """A side output's name (and, for PyFlink compatibility, its type). Emit to it with
    `ctx.output(tag, value)` in a (Keyed)ProcessFunction; read it with
    `stream.get_side_output(tag)`. Two tags with the same id are the same side output."""

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ValueError(f"an OutputTag needs a non-empty string id, got {tag_id!r}")
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"

"""Redis stream entry ids (`<milliseconds>-<sequence>`) and the pure decisions made with them."""

from __future__ import annotations

#: the id before every entry: XREAD from it returns a stream from its first entry
BEGINNING = "0-0"


def parse_id(entry_id: str) -> tuple[int, int]:
    """`"1700000000000-3"` -> (1700000000000, 3); a bare `"5"` is `(5, 0)`."""
    ms, _, seq = entry_id.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        raise ValueError(f"not a Redis stream entry id: {entry_id!r} (<ms>-<seq>)") from None


def id_after(entry_id: str, bound: str | None) -> bool:
    """Whether `entry_id` lies beyond `bound` (None: no bound, never beyond)."""
    return bound is not None and parse_id(entry_id) > parse_id(bound)


def split_finished(last_id: str, end_id: str | None) -> bool:
    """A bounded split is finished once it returned the entry `end_id` (or anything later)."""
    return end_id is not None and parse_id(last_id) >= parse_id(end_id)

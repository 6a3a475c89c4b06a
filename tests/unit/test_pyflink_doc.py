"""docs/pyflink.md cannot drift from the code: every name of a row marked supported or
supported differently, and every name the package table says is importable, is importable
from the tidegate path the page gives."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pyflink.md"
STATUSES = ("supported", "supported differently", "not supported")
SECTION = re.compile(r"^### `(pyflink(?:\.\w+)*)`\s*$")
ROW = re.compile(r"^\| (?P<names>.+?) \| (?P<status>[a-z ]+) \| (?P<notes>.*) \|$")
PACKAGE_ROW = re.compile(r"^\| `(pyflink(?:\.\w+)*)` \| (?P<have>.*) \| (?P<miss>.*) \|$")
AT = re.compile(r"\(tidegate: `(tidegate(?:\.\w+)*)`\)")
TICKED = re.compile(r"`([\w.]+)`")


def tidegate_path(pyflink_module: str) -> str:
    return "tidegate" + pyflink_module[len("pyflink") :]


def lookup(path: str) -> object:
    """The object at a dotted path: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def parse_rows() -> list[tuple[str, str, str, str]]:
    """(pyflink module, names cell, status, notes) of every name row."""
    rows, module = [], None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        heading = SECTION.match(line)
        if heading:
            module = heading.group(1)
            continue
        row = ROW.match(line)
        if module and row and row.group("status") in STATUSES:
            rows.append((module, row.group("names"), row.group("status"), row.group("notes")))
    return rows


def lists_members(names: str) -> bool:
    """A row of members of one class: "`Class`: `m1`, `m2`" (otherwise every name is its own)."""
    return names.startswith(f"`{TICKED.findall(names)[0]}`: ")


def targets(module: str, names: str, notes: str) -> list[str]:
    """The tidegate paths a row claims: its first name, then its members if it lists any."""
    ticked = TICKED.findall(names)
    at = AT.search(notes)
    first = at.group(1) if at else f"{tidegate_path(module)}.{ticked[0]}"
    if lists_members(names):
        return [first] + [f"{first}.{member}" for member in ticked[1:]]
    return [first]


ROWS = parse_rows()
CLAIMED = [row for row in ROWS if row[2] != "not supported"]


def test_page_has_rows_of_every_status() -> None:
    statuses = {status for _, _, status, _ in ROWS}
    assert statuses == set(STATUSES)
    assert len(CLAIMED) > 300


@pytest.mark.parametrize(("module", "names", "status", "notes"), CLAIMED, ids=lambda v: str(v)[:60])
def test_supported_row_is_importable(module: str, names: str, status: str, notes: str) -> None:
    for path in targets(module, names, notes):
        lookup(path)


def test_package_table_names_are_importable() -> None:
    seen = 0
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        row = PACKAGE_ROW.match(line)
        if not row:
            continue
        package = importlib.import_module(tidegate_path(row.group(1)))
        for name in TICKED.findall(row.group("have")):
            assert hasattr(package, name), f"{package.__name__}.{name}"
            seen += 1
        for name in TICKED.findall(row.group("miss")):
            assert not hasattr(package, name), f"{package.__name__}.{name} exists: update the page"
    assert seen > 40


def test_summary_counts_match_the_tables() -> None:
    text = PAGE.read_text(encoding="utf-8")
    counted = dict.fromkeys(STATUSES, 0)
    for _module, names, status, _notes in ROWS:
        counted[status] += len(TICKED.findall(names)) - (1 if lists_members(names) else 0)
    summary = re.search(
        r"\*\*(\d+) are supported\*\*.*?"
        r"\*\*(\d+) are supported differently\*\*.*?"
        r"\*\*(\d+) are not supported\*\*",
        text,
        re.S,
    )
    assert summary, "summary counts not found"
    assert [int(n) for n in summary.groups()] == [counted[s] for s in STATUSES]

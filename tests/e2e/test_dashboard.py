"""The web dashboard in headless Chromium (Debian's `chromium` package, installed by
`scripts/setup.sh test`): it must render the data of a job running on Spark — its graph,
record counts, completed checkpoints and a checkpoint's subtasks — and a screenshot of it must
be a real rendering, not a blank page."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.e2e.observed import PARALLELISM, observed_job, rest_url
from tests.e2e.png import decode_png
from tests.support.waiting import resolved
from tidegate.metrics.checkpoint_stats import CheckpointStatus

WINDOW = (1280, 1600)


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "Chromium is missing, and the dashboard test needs it: run `bash scripts/setup.sh test` "
        "(it installs Debian's chromium package) or `apt-get install -y chromium`"
    )


def browse(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Load `url` in headless Chromium, letting the page run 10 s of (virtual) time."""
    return subprocess.run(
        [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={profile}", "--virtual-time-budget=10000",
            f"--window-size={WINDOW[0]},{WINDOW[1]}", *args, url,
        ],
        capture_output=True, text=True, check=True,
    )  # fmt: skip


class Elements(HTMLParser):
    """Every element's tag, attributes and (for text checks) all text of the page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, css_class: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and css_class in a.get("class", "").split()]

    def by_id(self, element_id: str) -> dict[str, str]:
        return next(a for _t, a in self.elements if a.get("id") == element_id)


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    client = observed_job(
        tmp_path_factory.mktemp("dashboard"), "dashboard job", n=400_000, checkpoints=3
    )
    yield client
    resolved(client.cancel(), "the job to be cancelled")


def test_the_dashboard_renders_the_graph_records_and_checkpoints_of_a_running_job(job, tmp_path):
    jm, jid = job.jobmaster, job.get_job_id()
    completed_before = jm.stats.completed_checkpoints
    page = Elements(browse(f"{rest_url()}/#/jobs/{jid}", tmp_path, "--dump-dom").stdout)
    assert page.by_id("app")["data-state"] == "ready"
    header = page.by_id("job")
    assert (header["data-job-id"], header["data-state"]) == (jid, "RUNNING")
    text = " ".join(page.text)
    graph = jm.spec.graph
    vertices = {int(a["data-vertex-id"]): a for a in page.having("g", "vertex")}
    assert set(vertices) == set(graph.vertices)
    rows = {int(a["data-vertex-id"]): a for a in page.having("tr", "vertex-row")}
    for vertex in graph.vertices.values():
        assert vertex.name in text
        assert int(vertices[vertex.vertex_id]["data-records-in"]) > 0
        assert int(rows[vertex.vertex_id]["data-records-in"]) > 0
    assert len(page.having("tr", "subtask-row")) == PARALLELISM * len(graph.vertices)
    checkpoints = page.having("tr", "checkpoint")
    shown = [int(a["data-checkpoint-id"]) for a in checkpoints if a["data-status"] == "COMPLETED"]
    assert len(shown) >= completed_before
    for cid in shown:  # what the page shows as completed is what the driver knows
        assert jm.stats.checkpoints.checkpoint(cid).status is CheckpointStatus.COMPLETED
    assert int(page.by_id("checkpoints")["data-completed"]) >= completed_before


def test_a_checkpoint_drills_down_to_its_subtasks(job, tmp_path):
    jid = job.get_job_id()
    cid = job.jobmaster.stats.last_checkpoint.checkpoint_id
    url = f"{rest_url()}/#/jobs/{jid}/checkpoints/{cid}"
    page = Elements(browse(url, tmp_path, "--dump-dom").stdout)
    assert page.by_id("checkpoint-details")["data-checkpoint-id"] == str(cid)
    tables = page.having("table", "subtasks")
    assert {int(t["data-vertex-id"]) for t in tables} == set(job.jobmaster.spec.graph.vertices)
    acked = [a for a in page.having("tr", "subtask") if a["data-status"] == "completed"]
    assert len(acked) == PARALLELISM * len(tables)
    selected = [a for a in page.having("tr", "checkpoint") if "selected" in a["class"]]
    assert [a["data-checkpoint-id"] for a in selected] == [str(cid)]


def test_the_job_list_links_to_the_job(job, tmp_path):
    page = Elements(browse(f"{rest_url()}/", tmp_path, "--dump-dom").stdout)
    assert job.get_job_id() in [a["data-job-id"] for a in page.having("tr", "job")]


def test_a_screenshot_of_the_dashboard_is_a_real_rendering(job, tmp_path):
    shot = tmp_path / "dashboard.png"
    browse(f"{rest_url()}/#/jobs/{job.get_job_id()}", tmp_path / "profile", f"--screenshot={shot}")
    image = decode_png(shot.read_bytes())
    assert (image.width, image.height) == WINDOW
    pixels = [
        image.pixel(x, y) for y in range(0, image.height, 4) for x in range(0, image.width, 4)
    ]
    colors = set(pixels)
    assert len(colors) > 50, f"only {len(colors)} colors: a blank page?"
    background = {(255, 255, 255), (0xF5, 0xF7, 0xFA)}
    drawn = sum(p not in background for p in pixels) / len(pixels)
    assert drawn > 0.05, f"only {drawn:.1%} of the page is drawn"

    def near(color: tuple[int, int, int]) -> bool:
        return any(max(abs(a - b) for a, b in zip(p, color, strict=True)) <= 8 for p in colors)

    assert near((0x14, 0x32, 0x4F)), "the header bar (the stylesheet) did not render"
    assert near((0x2E, 0x85, 0x40)), "no green RUNNING/COMPLETED badge or busy bar rendered"

"""A clean (not editable) install of tidegate works: its wheel holds every module and the
dashboard's files, and installed into a new virtualenv it gives a working `tidegate` command.

The wheel is built from a copy of the sources without build isolation (setuptools comes from
the lock, so nothing is downloaded). The new virtualenv gets tidegate from the wheel alone; its
dependencies come from this test run's environment through a `.pth` line (a path added that
way is not a site directory, so this environment's editable tidegate is not seen there).
"""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

import tidegate

# building the wheel and installing it into a new venv depend on the network, so the ceiling
# is above the suite's 300 s
pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).parents[2]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, check=True)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "tidegate", source / "tidegate", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("wheel")
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(out),
        str(source),
    )
    (built,) = out.glob("tidegate-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A new virtualenv with tidegate installed from the wheel; returns its bin directory."""
    env_dir = tmp_path_factory.mktemp("clean-venv")
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", str(wheel))
    purelib = run(str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
    deps = sysconfig.get_path("purelib")  # this run's environment: pyspark, cloudpickle, ...
    Path(purelib.stdout.strip(), "dependencies.pth").write_text(deps + "\n")
    return env_dir / "bin"


def test_the_wheel_holds_every_module_and_the_dashboard_files(wheel):
    package = ROOT / "tidegate"
    expected = {
        f"tidegate/{p.relative_to(package).as_posix()}"
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = configparser.ConfigParser()
        (ep,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points.read_string(zf.read(ep).decode())
    assert expected <= names, sorted(expected - names)
    assert {"tidegate/rest/static/index.html", "tidegate/rest/static/app.js"} <= names
    assert entry_points["console_scripts"]["tidegate"] == "tidegate.cli:main"
    assert wheel.name.startswith(f"tidegate-{tidegate.__version__}-")


def test_the_installed_command_prints_its_version(installed):
    shown = run(str(installed / "tidegate"), "--version")
    assert shown.stdout.strip() == f"tidegate {tidegate.__version__}"


JOB = textwrap.dedent(
    """
    import json, sys, urllib.request
    import tidegate
    from tidegate.common import Encoder
    from tidegate.datastream import StreamExecutionEnvironment
    from tidegate.datastream.connectors.file_system import FileSink
    from tidegate.datastream.connectors.number_seq import NumberSequenceSource
    from tidegate.rest.registry import JobRegistry
    from tidegate.rest.routes import RestApi
    from tidegate.rest.server import RestServer

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpoint_storage_dir(sys.argv[2])
    numbers = env.from_source(NumberSequenceSource(1, 500), None, "numbers")
    numbers.map(lambda x: x + 1).sink_to(
        FileSink.for_row_format(sys.argv[1], Encoder.simple_string_encoder()).build()
    )
    env.execute("installed")

    server = RestServer(RestApi(JobRegistry()), "127.0.0.1", [0])
    pages = {}
    for page in ("/", "/web/app.js", "/web/style.css"):
        with urllib.request.urlopen(server.url + page, timeout=30) as answer:
            pages[page] = [answer.status, len(answer.read())]
    server.close()
    print(json.dumps({"package": tidegate.__file__, "pages": pages}))
    """
)


def test_the_installed_command_runs_a_job_and_serves_the_dashboard(installed, tmp_path):
    from tests.support.output import committed_lines

    (tmp_path / "job.py").write_text(JOB)
    out, chk = tmp_path / "out", tmp_path / "chk"
    # run from an empty directory: nothing of the source tree is importable from there
    result = run(
        str(installed / "tidegate"), "run", "job.py", "--runner", "local", "--",
        str(out), str(chk), cwd=tmp_path,
    )  # fmt: skip
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(report["package"]).is_relative_to(installed.parent), report
    assert all(status == 200 and size > 0 for status, size in report["pages"].values()), report
    assert sorted(map(int, committed_lines(out))) == list(range(2, 502))

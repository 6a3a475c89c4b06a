"""The job's Python code, packages and archives, shipped to every worker (PyFlink's
`add_python_file`, `set_python_requirements`, `add_python_archive`, and the job script's own
directory).

A job's functions are pickled by value when the job script defines them, but by reference when
they come from a module the script imports (`from helpers import parse`): a worker must be able
to import that module. Executors of a cluster, or slots started in another working directory,
cannot see the driver's files, so the driver packs them and they travel with the deployment:

* `PythonDependencies.collect(...)` (driver): one zip of the Python files and directories (a
  directory's content goes to the zip's root, as it would be on PYTHONPATH; `__pycache__`,
  hidden and virtualenv directories are left out), plus the requirements file and, for offline
  installs, the wheels of its cache directory;
* `installed(deps)` (worker, before the job is unpickled): extracts the zip once per host into
  `<tmp>/tidegate-python-<uid>/<digest>/`, installs the requirements once per host with `pip
  install --target` (only from the shipped wheels when a cache directory was given), and puts
  both first on `sys.path` for the slot's lifetime; afterwards the paths and the modules
  imported from them are removed again (a Spark Python worker runs other jobs later);
* archives (zip, tar, tar.gz/tgz, tar.bz2, tar.xz) are extracted once per host too, and the slot
  runs in a working directory of its own where each appears under its target directory name
  (so user functions open their files by relative path, as in PyFlink); the previous working
  directory is restored when the slot ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: what a packed directory leaves out (caches, version control, virtualenvs)
_SKIPPED_DIRS = {"__pycache__", "site-packages", "node_modules"}
#: a shipped bundle larger than this is refused (it travels with every slot's deployment)
MAX_BUNDLE_BYTES = 64 * 1024 * 1024


class PythonDependencyError(ValueError):
    """A Python dependency cannot be shipped or installed; the message says what to do."""


@dataclass(frozen=True)
class PythonDependencies:
    #: a zip whose root goes on sys.path (None: no files)
    files: bytes | None = None
    #: the content of the requirements file (None: none)
    requirements: bytes | None = None
    #: a zip of the requirements' wheels (set_python_requirements' cache directory), for
    #: workers without a package index
    wheels: bytes | None = None
    #: (target directory, archive file name, archive bytes) of each add_python_archive
    archives: tuple[tuple[str, str, bytes], ...] = ()

    @property
    def empty(self) -> bool:
        return self.files is None and self.requirements is None and not self.archives

    def digest(self, *parts: bytes | None) -> str:
        h = hashlib.sha256()
        for part in parts:
            h.update(b"-" if part is None else hashlib.sha256(part).digest())
        return h.hexdigest()[:20]

    @classmethod
    def collect(
        cls,
        paths: Iterable[str],
        requirements: str | None = None,
        cache_dir: str | None = None,
        archives: Iterable[tuple[str, str | None]] = (),
    ) -> PythonDependencies:
        """Pack `paths` (files, packages, directories), the requirements and the `archives`
        ((archive path, target directory or None for the archive's file name)), driver side."""
        files = _zip_paths(list(paths))
        packed = tuple(_archive(path, target) for path, target in archives)
        if sum(len(data) for _, _, data in packed) > MAX_BUNDLE_BYTES:
            raise PythonDependencyError(
                f"the Python archives are larger than {MAX_BUNDLE_BYTES >> 20} MiB together; "
                "they travel with every slot's deployment: put large data on storage every "
                "worker reads (a shared filesystem, S3) instead"
            )
        req = wheels = None
        if requirements is not None:
            req = _read(requirements, "requirements file")
            if cache_dir is not None:
                if not os.path.isdir(cache_dir):
                    raise PythonDependencyError(
                        f"the requirements cache directory {cache_dir} does not exist; give "
                        "a directory of wheels (e.g. made by `pip download -d DIR -r FILE`)"
                    )
                wheels = _zip_paths([cache_dir])
        return cls(files, req, wheels, packed)


def script_directory() -> str | None:
    """The directory of the job script the driver runs (`python job.py`, `tidegate run
    job.py`); None in an interactive session or under a test runner."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        return None
    if Path(path).name in ("pytest", "__main__.py") or "pytest" in Path(path).parts:
        return None
    return os.path.dirname(os.path.abspath(path))


def _archive_format(name: str) -> str | None:
    """shutil's unpack format for an archive file name (None: not an archive it can read)."""
    for fmt, extensions, _ in shutil.get_unpack_formats():
        if any(name.endswith(ext) for ext in extensions):
            return fmt
    return None


def _archive(path: str, target: str | None) -> tuple[str, str, bytes]:
    name = os.path.basename(path)
    if _archive_format(name) is None:
        known = ", ".join(ext for _, exts, _ in shutil.get_unpack_formats() for ext in exts)
        raise PythonDependencyError(
            f"{path} is not an archive tidegate can extract (by its name: one of {known})"
        )
    target = name if target is None else target
    parts = Path(target).parts
    if not target or Path(target).is_absolute() or ".." in parts or "." in parts:
        raise PythonDependencyError(
            f"the target directory of archive {path} must be a relative path inside the "
            f"worker's working directory (no '..'), got {target!r}"
        )
    return target, name, _read(path, "Python archive")


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise PythonDependencyError(f"cannot read the {what} {path}: {e.strerror}") from None


def _zip_paths(paths: list[str]) -> bytes | None:
    if not paths:
        return None
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in paths:
            if os.path.isdir(path):
                for file, name in _files_of(Path(path)):
                    zf.write(file, name)
            elif os.path.isfile(path):
                zf.write(path, os.path.basename(path))
            else:
                raise PythonDependencyError(
                    f"the Python dependency {path} does not exist; give a .py file, a package "
                    "or a directory (relative paths are taken from the driver's working "
                    f"directory, {os.getcwd()})"
                )
            if buffer.tell() > MAX_BUNDLE_BYTES:
                raise PythonDependencyError(
                    f"the Python files to ship are larger than {MAX_BUNDLE_BYTES >> 20} MiB "
                    f"(at {path}); ship only code, install large packages on the executors, or "
                    "disable shipping the script's directory (tidegate.python.ship-script-dir)"
                )
    return buffer.getvalue()


def _files_of(root: Path) -> Iterator[tuple[Path, str]]:
    """The files of `root` with their names relative to it, in a stable order."""
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(
            d
            for d in subdirs
            if d not in _SKIPPED_DIRS
            and not d.startswith(".")
            and not (Path(directory, d) / "pyvenv.cfg").exists()
        )
        for name in sorted(files):
            file = Path(directory, name)
            # sockets, FIFOs and broken links (a script in /tmp) are nothing to ship
            if not name.endswith((".pyc", ".pyo")) and file.is_file():
                yield file, str(file.relative_to(root))


# worker side ---------------------------------------------------------------------------------
def _cache_root() -> Path:
    root = Path(tempfile.gettempdir()) / f"tidegate-python-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    return root


@contextlib.contextmanager
def _host_lock(root: Path) -> Iterator[None]:
    """One slot per host installs; the others wait (a pip install can take a while)."""
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _install(deps: PythonDependencies) -> list[str]:
    """The directories to put on sys.path, extracted or installed once per host."""
    root, paths = _cache_root(), []
    with _host_lock(root):
        if deps.files is not None:
            target = root / f"files-{deps.digest(deps.files)}"
            if not target.exists():
                _extract(deps.files, target)
            paths.append(str(target))
        if deps.requirements is not None:
            target = root / f"requirements-{deps.digest(deps.requirements, deps.wheels)}"
            if not target.exists():
                _pip_install(deps, root, target)
            paths.append(str(target))
    return paths


def _extract(data: bytes, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        zf.extractall(staging)
    os.rename(staging, target)  # whole or not at all


def _pip_install(deps: PythonDependencies, root: Path, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".install-"))
    try:
        requirements = staging / "requirements.txt"
        requirements.write_bytes(deps.requirements or b"")
        (staging / "site").mkdir()
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        command += ["--target", str(staging / "site"), "-r", str(requirements)]
        if deps.wheels is not None:
            _extract(deps.wheels, staging / "wheels")
            command += ["--no-index", "--find-links", str(staging / "wheels")]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise PythonDependencyError(
                "installing the job's Python requirements on this worker failed "
                f"(pip exit code {done.returncode}): {done.stderr.strip()[-2000:]}. Check the "
                "requirements file; a worker without a package index needs the wheels: pass "
                "set_python_requirements(file, cache_dir) with a directory made by "
                "`pip download -d DIR -r FILE`"
            )
        os.rename(staging / "site", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract_archive(name: str, data: bytes, target: Path) -> None:
    """Unpack an archive into `target`, whole or not at all; tar members that would land
    outside it (absolute paths, '..', links out) are refused by tarfile's "data" filter."""
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".archive-"))
    try:
        archive = staging / name
        archive.write_bytes(data)
        (staging / "content").mkdir()
        fmt = _archive_format(name)
        try:
            if fmt == "zip":
                shutil.unpack_archive(archive, staging / "content", fmt)
            else:
                shutil.unpack_archive(archive, staging / "content", fmt, filter="data")
        except (OSError, ValueError, shutil.ReadError, tarfile.TarError) as e:
            raise PythonDependencyError(f"cannot extract the Python archive {name}: {e}") from e
        os.rename(staging / "content", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _archive_dirs(deps: PythonDependencies) -> list[tuple[str, Path]]:
    """(target directory, extracted directory) of each archive, extracted once per host."""
    root, out = _cache_root(), []
    with _host_lock(root):
        for target, name, data in deps.archives:
            extracted = root / f"archive-{deps.digest(data)}"
            if not extracted.exists():
                _extract_archive(name, data, extracted)
            out.append((target, extracted))
    return out


@contextlib.contextmanager
def _working_directory(archives: list[tuple[str, Path]]) -> Iterator[None]:
    """Run in a fresh working directory holding each archive under its target name."""
    if not archives:
        yield
        return
    workdir = Path(tempfile.mkdtemp(dir=_cache_root(), prefix="workdir-"))
    for target, extracted in archives:
        link = workdir / target
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(extracted, target_is_directory=True)
    previous = os.getcwd()
    os.chdir(workdir)
    try:
        yield
    finally:
        os.chdir(previous)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def installed(deps: PythonDependencies | None) -> Iterator[None]:
    """The job's Python dependencies importable, and its archives in the working directory,
    while the block runs (worker side)."""
    if deps is None or deps.empty:
        yield
        return
    paths = _install(deps)
    archives = _archive_dirs(deps)
    sys.path[:0] = paths
    try:
        with _working_directory(archives):
            yield
    finally:
        for path in paths:
            with contextlib.suppress(ValueError):
                sys.path.remove(path)
        for name, module in list(sys.modules.items()):
            origin = getattr(module, "__file__", None) or ""
            if any(origin.startswith(path + os.sep) for path in paths):
                del sys.modules[name]

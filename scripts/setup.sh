#!/usr/bin/env bash
# Set up tidegate on a fresh machine, then run the example or the tests.
#
#   bash scripts/setup.sh                       # create .venv, install, check Java
#   bash scripts/setup.sh run-example [ARGS]    # ... then run examples/account_balances.py
#   bash scripts/setup.sh test [PYTEST ARGS]    # ... installs Chromium (apt), then ruff check
#                                               #     + pytest (CI runs this)
#
# The virtualenv is `.venv` in the repository root, with the package installed editable with
# its test extras (`pip install -e '.[test]'`); it is reinstalled only when pyproject.toml
# changed since the last install. Environment: PYTHON=python3.12 picks the interpreter.
# `test` exits with pytest's status (ruff's findings are reported, not fatal).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
STAMP="$VENV/.tidegate-installed"

if [[ -t 2 ]]; then
    say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
else
    say() { printf '==> %s\n' "$*" >&2; }
fi
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

find_python() {
    local candidates=("${PYTHON:-}" python3 python3.13 python3.12 python3.11 python)
    for py in "${candidates[@]}"; do
        [[ -n "$py" ]] && command -v "$py" >/dev/null 2>&1 || continue
        if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$py"
            return 0
        fi
    done
    return 1
}

ensure_venv() {
    if [[ ! -x "$VENV/bin/python" ]]; then
        local py
        py="$(find_python)" || die "tidegate needs Python 3.11 or newer, and none was found.
  Debian/Ubuntu: apt-get install -y python3 python3-venv   (or set PYTHON=/path/to/python3.11+)"
        say "creating $VENV with $("$py" --version 2>&1)"
        "$py" -m venv "$VENV" || { rm -rf "$VENV"; die "could not create the virtualenv.
  Debian/Ubuntu: apt-get install -y python3-venv"; }
    fi
    if [[ ! -f "$STAMP" || "$ROOT/pyproject.toml" -nt "$STAMP" ]]; then
        say "installing tidegate and its test extras into .venv (pip install -e '.[test]')"
        local log="$VENV/pip-install.log"
        if ! { "$VENV/bin/python" -m pip install --upgrade pip \
                && "$VENV/bin/python" -m pip install -e "$ROOT[test]"; } >"$log" 2>&1; then
            tail -n 30 "$log" >&2
            die "pip install failed (full log: $log)"
        fi
        touch "$STAMP"
    fi
}

# Spark needs a JVM: Java 17 or newer (PySpark 4). Returns 1 with a message if it is missing.
check_java() {
    local java="java"
    [[ -n "${JAVA_HOME:-}" ]] && java="$JAVA_HOME/bin/java"
    if ! command -v "$java" >/dev/null 2>&1; then
        cat >&2 <<'EOF'
Java was not found, and Spark needs Java 17 or newer. Install it:
  Debian/Ubuntu:  sudo apt-get install -y openjdk-17-jre-headless
  macOS:          brew install openjdk@17
or set JAVA_HOME. (Without Java, run the example on the local runner:
  bash scripts/setup.sh run-example --runner local)
EOF
        return 1
    fi
    local version major
    version="$("$java" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -1)"
    major="${version%%.*}"
    [[ "$major" == 1 ]] && major="$(echo "$version" | cut -d. -f2)"  # "1.8.0" -> 8
    if [[ -z "$major" || "$major" -lt 17 ]]; then
        cat >&2 <<EOF
Spark needs Java 17 or newer; found version ${version:-unknown} ($(command -v "$java")).
  Debian/Ubuntu:  sudo apt-get install -y openjdk-17-jre-headless
then put it first on PATH or set JAVA_HOME.
EOF
        return 1
    fi
}

# The dashboard test drives headless Chromium: install Debian's chromium package unless a
# Chromium is on the PATH (apt-get as root, else through sudo). Failing to install is reported,
# not fatal: that test then fails and says why.
ensure_chromium() {
    if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
        return 0
    fi
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || {
            say "warning: Chromium is missing (the dashboard test needs it): apt-get install chromium"
            return 0
        }
        sudo=(sudo)
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        say "warning: Chromium is missing and there is no apt-get: install Chromium for the dashboard test"
        return 0
    fi
    say "installing Chromium for the dashboard test (apt-get install chromium)"
    local log="${TMPDIR:-/tmp}/tidegate-chromium-install.log"
    if ! { "${sudo[@]}" apt-get update -qq \
            && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
            >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        say "warning: could not install Chromium (log: $log): the dashboard test will fail"
    fi
}

uses_local_runner() {
    local previous=""
    for arg in "$@"; do
        [[ "$arg" == "--runner=local" || ( "$previous" == "--runner" && "$arg" == "local" ) ]] \
            && return 0
        previous="$arg"
    done
    return 1
}

command="${1:-setup}"
[[ $# -gt 0 ]] && shift
case "$command" in
    setup)
        ensure_venv
        check_java || exit 1
        say "ready. Next: bash scripts/setup.sh run-example   or   bash scripts/setup.sh test"
        ;;
    run-example)
        ensure_venv
        uses_local_runner "$@" || check_java || exit 1
        say "running examples/account_balances.py $*"
        exec "$VENV/bin/python" "$ROOT/examples/account_balances.py" "$@"
        ;;
    test)
        ensure_venv
        check_java || say "warning: without Java the Spark tests will fail"
        ensure_chromium
        say "ruff check"
        "$VENV/bin/ruff" check "$ROOT" || say "warning: ruff found problems (see above)"
        say "pytest $*"
        exec "$VENV/bin/pytest" "$@"
        ;;
    -h|--help|help)
        sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
        ;;
    *)
        die "unknown command '$command'; use: setup | run-example [ARGS] | test [PYTEST ARGS]"
        ;;
esac

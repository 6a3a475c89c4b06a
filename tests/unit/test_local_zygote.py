"""The local runner's zygote (tidegate/deploy/local_zygote.py): real zygote and slot processes,
started by `start_slot` as LocalSlots starts them. A test's "deployment" is a pickle whose
loading runs a line of Python in the slot process (the slot's entry unpickles it first), so the
slots exit, kill themselves or report what they see without a job."""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import time

from tidegate.deploy import local_zygote
from tidegate.deploy.local_zygote import ForkedSlot, ZygoteKey, start_slot


class _Run:
    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return (exec, (self.code,))


def deployment(code: str) -> bytes:
    return pickle.dumps(_Run(code))


def gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie of ours (the zygote is the test process's child) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        time.sleep(0.05)
    return False


def test_exit_codes_and_signals_reach_the_driver_as_popen_has_them() -> None:
    exits = start_slot(deployment("import sys; sys.exit(3)"), 0)
    fails = start_slot(deployment("raise ValueError('bad job')"), 1)
    killed = start_slot(deployment("import os; os.kill(os.getpid(), 9)"), 2)
    sleeps = start_slot(deployment("import time; time.sleep(60)"), 3)
    ends = start_slot(deployment("import os; os._exit(0)"), 4)
    slots = [exits, fails, killed, sleeps, ends]
    assert all(isinstance(s, ForkedSlot) for s in slots)
    zygote = local_zygote._zygote
    assert zygote is not None
    assert len({s.pid for s in slots} | {os.getpid(), zygote.process.pid}) == 7
    sleeps.terminate()
    assert [s.wait(30) for s in slots] == [3, 1, -signal.SIGKILL, -signal.SIGTERM, 0]
    sleeps.kill()  # after its end: nothing to signal, no error


def test_a_forked_slot_sees_what_a_fresh_slot_process_sees(
    tmp_path, monkeypatch, capfd, caplog
) -> None:
    """Working directory, environment, sys.path and standard streams of the requesting driver,
    at the time of the request (a changed environment or directory gets a new zygote); the
    fresh process is the fallback of a zygote that cannot start."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TIDEGATE_ZYGOTE_TEST", "value")
    before = local_zygote._zygote
    code = (
        "import json, os, sys; print('out-' + sys.argv[1]); print('err', file=sys.stderr); "
        "open(os.environ['REPORT'], 'w').write(json.dumps("
        "[os.getcwd(), os.environ['TIDEGATE_ZYGOTE_TEST'], sys.path, sys.stdin.read()])); "
        "sys.exit(4)"
    )
    monkeypatch.setenv("REPORT", str(tmp_path / "forked"))
    forked = start_slot(deployment(code), 7)
    assert isinstance(forked, ForkedSlot)
    assert local_zygote._zygote is not before
    assert forked.wait(30) == 4

    broken = ZygoteKey("/nonexistent/python", os.getcwd(), tuple(sorted(os.environ.items())))
    monkeypatch.setattr(ZygoteKey, "current", staticmethod(lambda: broken))
    monkeypatch.setenv("REPORT", str(tmp_path / "fresh"))
    with caplog.at_level(logging.WARNING, logger=local_zygote.__name__):
        fresh = start_slot(deployment(code), 7)
    assert isinstance(fresh, subprocess.Popen)
    assert fresh.wait(30) == 4
    assert "zygote did not start ([Errno 2] No such file or directory" in caplog.text

    seen_forked, seen_fresh = (json.loads((tmp_path / n).read_text()) for n in ("forked", "fresh"))
    assert seen_forked[:3] == seen_fresh[:3] == [str(tmp_path), "value", seen_fresh[2]]
    assert seen_forked[3] == ""  # a fresh slot read its deployment from stdin: nothing left
    captured = capfd.readouterr()
    assert captured.out.count("out-7") == 2
    assert captured.err.count("err") == 2


def test_pytests_per_test_variable_keeps_the_zygote_and_reaches_each_slot(
    tmp_path, monkeypatch
) -> None:
    """PYTEST_CURRENT_TEST changes with every test: it starts no new zygote, and each forked
    slot sees its value at the request (or none, unset)."""
    seen = []
    zygotes = set()
    for i, value in enumerate(("first test (call)", "second test (call)", None)):
        if value is None:
            monkeypatch.delenv("PYTEST_CURRENT_TEST")
        else:
            monkeypatch.setenv("PYTEST_CURRENT_TEST", value)
        report = tmp_path / f"seen-{i}"
        code = (
            f"import os, sys; open({str(report)!r}, 'w')"
            ".write(os.environ.get('PYTEST_CURRENT_TEST', '<unset>')); sys.exit(0)"
        )
        slot = start_slot(deployment(code), 0)
        assert isinstance(slot, ForkedSlot)
        assert slot.wait(30) == 0
        zygotes.add(id(local_zygote._zygote))
        seen.append(report.read_text())
    assert seen == ["first test (call)", "second test (call)", "<unset>"]
    assert len(zygotes) == 1


def test_a_killed_zygote_fails_its_slots_and_is_replaced() -> None:
    sleeping = start_slot(deployment("import time; time.sleep(60)"), 0)
    zygote = local_zygote._zygote
    assert zygote is not None
    os.kill(zygote.process.pid, signal.SIGKILL)
    assert sleeping.wait(30) == -signal.SIGKILL
    assert gone(sleeping.pid)
    again = start_slot(deployment("import sys; sys.exit(5)"), 0)
    assert isinstance(again, ForkedSlot)
    assert local_zygote._zygote is not zygote
    assert again.wait(30) == 5


def test_the_zygote_exits_with_its_driver(tmp_path) -> None:
    driver = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from tests.unit.test_local_zygote import deployment; "
        "from tidegate.deploy import local_zygote; "
        "slot = local_zygote.start_slot(deployment('import sys; sys.exit(0)'), 0); "
        "assert slot.wait(30) == 0; print(local_zygote._zygote.process.pid)"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", driver, root], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert gone(int(out.stdout.split()[-1]))


def test_a_zygote_whose_imports_started_a_thread_leaves_the_slot_to_a_fresh_process(
    tmp_path, monkeypatch, caplog
) -> None:
    """Forking a process with a second thread could copy a lock that thread holds: a zygote
    with one after its imports exits, and the driver starts the slot as a fresh process."""
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)  # a new environment: a new zygote
    monkeypatch.setattr(local_zygote, "driver_modules", lambda: ["starts_a_thread"])
    monkeypatch.setattr(local_zygote, "_broken", None)
    with caplog.at_level(logging.WARNING, logger=local_zygote.__name__):
        slot = start_slot(deployment("import sys; sys.exit(6)"), 0)
    assert isinstance(slot, subprocess.Popen)
    assert slot.wait(30) == 6
    assert "zygote did not start slot 0" in caplog.text


def test_the_zygote_preloads_the_drivers_api_modules_not_the_client_libraries() -> None:
    import tidegate.datastream
    import tidegate.datastream.connectors.file_system  # noqa: F401

    modules = local_zygote.driver_modules()
    assert "tidegate.datastream" in modules and "tidegate.runtime.operators" in modules
    assert not [m for m in modules if m.startswith(local_zygote.NOT_PRELOADED)]
    assert "tidegate.connectors.file_sink" in sys.modules  # imported, but left to the slots

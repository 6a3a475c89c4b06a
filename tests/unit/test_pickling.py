"""common/pickling.py: plain pickle where it means what cloudpickle would, cloudpickle else."""

from __future__ import annotations

import pickle
import subprocess
import sys
import types

import cloudpickle
import pytest

from tidegate.common import pickling
from tidegate.runtime.windows.windows import TimeWindow


def test_importable_objects_are_plain_pickles_that_load_back():
    value = {TimeWindow(0, 2000): (1, "a", 2.5), "k": [1, 2]}
    data = pickling.dumps(value)
    assert data == pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(data) == value


def test_a_class_plain_pickle_cannot_name_is_carried_by_cloudpickle():
    def make():
        class Local:  # like a job script's class: not importable by name
            def __init__(self, n: int) -> None:
                self.n = n

        return Local(7)

    obj = make()
    with pytest.raises(pickling.REFUSED):
        pickle.dumps(obj)
    data = pickling.dumps({"k": obj})
    assert data == cloudpickle.dumps({"k": obj}, pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(data)["k"].n == 7


def test_a_module_registered_by_value_is_carried_not_named():
    module = types.ModuleType("tidegate_test_by_value")
    exec("class Point:\n    def __init__(self, x):\n        self.x = x\n", module.__dict__)
    sys.modules[module.__name__] = module
    cloudpickle.register_pickle_by_value(module)
    try:
        data = pickling.dumps(module.Point(3))
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[module.__name__]
    # loads without the module: the class travelled with the bytes
    assert pickle.loads(data).x == 3


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_windows_pickle_as_extension_codes_that_a_process_importing_tidegate_reads(tmp_path):
    entry = (5, TimeWindow(0, 2000), 3)
    data = pickling.dumps(entry)
    assert b"TimeWindow" not in data and len(data) < 40  # one byte names the class
    path = tmp_path / "entry.pickle"
    path.write_bytes(data)
    # a fresh process that imported only the package (not the windows module) reads it
    done = _python(
        f"import pickle, sys, tidegate; print(pickle.loads(open({str(path)!r}, 'rb').read()))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(entry)


def test_a_process_that_took_tidegates_extension_codes_cannot_import_it():
    done = _python("import copyreg; copyreg.add_extension('other', 'Thing', 240); import tidegate")
    assert done.returncode != 0
    assert "extension code 240" in done.stderr and "ImportError" in done.stderr

"""common/pickling.py: plain pickle where it means what cloudpickle would, cloudpickle else."""

from __future__ import annotations

import pickle
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

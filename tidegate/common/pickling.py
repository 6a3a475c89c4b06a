"""Pickling what tidegate stores or sends: plain pickle where it gives what cloudpickle would.

cloudpickle is what can carry the classes and functions of a job script (defined in
`__main__`, or in a module registered with `cloudpickle.register_pickle_by_value`), but its
pickler calls back into Python for every object that is not a basic type (a `TimeWindow` key
pickles ~3x slower). Plain pickle refuses an object of a class it cannot find by name (the job
script's), so trying it first and falling back gives cloudpickle's bytes' meaning; only a
module registered by value, which plain pickle would name instead of carrying, needs
cloudpickle from the start.
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

#: what plain pickle raises for an object it cannot pickle by name
REFUSED = (pickle.PicklingError, AttributeError, TypeError)


def dumps(obj: Any, protocol: int = pickle.HIGHEST_PROTOCOL) -> bytes:
    """`obj` pickled: plain pickle, or cloudpickle where only it carries the objects."""
    if not cloudpickle.list_registry_pickle_by_value():
        try:
            return pickle.dumps(obj, protocol)
        except REFUSED:
            pass
    return cloudpickle.dumps(obj, protocol)

"""How a job's code travels to its workers: cloudpickle, with user code keeping its file name.

cloudpickle pickles by value every function it cannot import by name (those of the job script,
lambdas, nested functions). From 3.1 on it renames the file of such code to `<dynamic-code>`,
so a traceback on a worker would say `File "<dynamic-code>", line 12` and nobody could find
the line. `dumps` records each code object's real file while pickling on the driver and
restores it when the worker unpickles: worker tracebacks, `linecache` and the CLI's error line
name the user's file and line whatever cloudpickle version is installed.
"""

from __future__ import annotations

import io
import types
from typing import Any

import cloudpickle


def dumps(obj: Any) -> bytes:
    """cloudpickle `obj`; code pickled by value is restored with its own file name."""
    buffer = io.BytesIO()
    _Pickler(buffer).dump(obj)
    return buffer.getvalue()


def _code_in_file(code: types.CodeType, filename: str) -> types.CodeType:
    """Called on the worker by the unpickler: `code` with `filename` as its file name."""
    return code if code.co_filename == filename else code.replace(co_filename=filename)


class _Pickler(cloudpickle.Pickler):
    """A code object is written as `_code_in_file(<a copy, as cloudpickle writes it>, file)`.

    The copy matters: the pickler memoizes an object after its reduction, and a reduction that
    contained the object itself would be replaced by the memoized inner one (pickle's rule for
    recursive objects), losing the file name. The copies are kept alive until the dump ends so
    their ids stay unique.
    """

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self._copies: dict[int, types.CodeType] = {}

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            if id(obj) in self._copies:
                return NotImplemented  # the copy: cloudpickle's own reduction
            copy = obj.replace(co_name=obj.co_name)  # equal, but a new object
            assert copy is not obj, "code.replace() returned the same object"
            self._copies[id(copy)] = copy
            return _code_in_file, (copy, obj.co_filename)
        return super().reducer_override(obj)

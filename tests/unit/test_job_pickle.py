"""A job pickled for its workers keeps the file names of the user code it carries by value."""

from __future__ import annotations

import runpy
import traceback

import cloudpickle

from tidegate.deploy import job_pickle

SCRIPT = """\
def outer(x):
    inverse = lambda y: 1 / y
    return inverse(x)


class Doubler:
    def map(self, value):
        return 2 * value
"""


def load_script(tmp_path):
    path = tmp_path / "user_job.py"
    path.write_text(SCRIPT)
    return str(path), runpy.run_path(str(path), run_name="__main__")


def test_functions_and_nested_lambdas_keep_their_file_and_lines(tmp_path):
    path, script = load_script(tmp_path)
    outer = cloudpickle.loads(job_pickle.dumps(script["outer"]))
    try:
        outer(0)
    except ZeroDivisionError as e:
        frames = traceback.extract_tb(e.__traceback__)[1:]
    assert [(f.filename, f.lineno, f.name, f.line) for f in frames] == [
        (path, 3, "outer", "return inverse(x)"),
        (path, 2, "<lambda>", "inverse = lambda y: 1 / y"),
    ]


def test_methods_of_classes_defined_in_the_script_keep_their_file(tmp_path):
    path, script = load_script(tmp_path)
    doubler = cloudpickle.loads(job_pickle.dumps(script["Doubler"]()))
    assert doubler.map(21) == 42
    assert type(doubler).map.__code__.co_filename == path


def test_a_function_referenced_twice_is_one_function_after_loading(tmp_path):
    _, script = load_script(tmp_path)
    first, second = cloudpickle.loads(job_pickle.dumps([script["outer"], script["outer"]]))
    assert first is second and first(4) == 0.25

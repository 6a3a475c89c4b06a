"""tidegate: stateful stream processing with Flink's checkpoint fault tolerance, on Apache Spark."""

import copyreg as _copyreg

__version__ = "0.1.0"

#: copyreg extension codes (PEP 307's private range, 240-255) for classes stored in every entry
#: of a window's keyed state: a pickle names them in one byte instead of a module and a class
#: name (48 bytes less per RocksDB entry) and loads them without an import lookup (~1 us less).
#: Registered here because every process that reads tidegate state imports tidegate first.
PICKLE_CODES = {
    ("tidegate.runtime.windows.windows", "TimeWindow"): 240,
    ("tidegate.runtime.windows.windows", "CountWindow"): 241,
    ("tidegate.runtime.windows.windows", "GlobalWindow"): 242,
}
for (_module, _name), _code in PICKLE_CODES.items():
    try:
        _copyreg.add_extension(_module, _name, _code)
    except ValueError as _taken:  # another library took the code: tidegate state is unreadable
        raise ImportError(
            f"tidegate reads and writes {_module}.{_name} as pickle extension code {_code}, "
            f"which this process already uses otherwise ({_taken}); do not register copyreg "
            "extension codes 240-242 in a process that uses tidegate"
        ) from None
del _module, _name, _code

"""The operator of `ConnectedStreams.map/flat_map/process`: a two-input operator calling
`call1(value, ctx)` for records of input 1 and `call2(value, ctx)` for input 2 (the
datastream layer adapts CoMap/CoFlatMap/Co(Keyed)ProcessFunction to this shape); each returns
an iterable of outputs or None.

On two connected KeyedStreams the record's key (`key_selector1` resp. `key_selector2`) is
current while it is processed, so keyed state and timers are the key's; timers, their restore
and the event-time clock work as in the one-input ProcessOperator (the task feeds the
minimum watermark of both inputs to `process_watermark`). Outputs inherit their record's
timestamp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidegate.runtime.operators import TimerServiceMixin, process_each
from tidegate.runtime.two_input import TwoInputStreamOperator

__all__ = ["CoProcessOperator"]

Call = Callable[[Any, Any], Any]


class CoProcessOperator(TimerServiceMixin, TwoInputStreamOperator):
    """See the module docstring."""

    tagged_outputs = True  # `yield tag, value` goes to a side output

    def __init__(
        self,
        function: Any,
        call1: Call,
        call2: Call,
        key_selector1: Any = None,
        key_selector2: Any = None,
        **kw: Any,
    ) -> None:
        super().__init__(function, **kw)
        if (key_selector1 is None) != (key_selector2 is None):
            raise ValueError("a keyed two-input operator needs the key selectors of both inputs")
        self.call1, self.call2 = call1, call2
        self.key_selector1, self.key_selector2 = key_selector1, key_selector2
        self.keyed = key_selector1 is not None

    def process_batch1(self, records: list) -> None:
        self._run(self.call1, self.key_selector1, records)

    def process_batch2(self, records: list) -> None:
        self._run(self.call2, self.key_selector2, records)

    def _run(self, call: Call, select: Any, records: list) -> None:
        out = process_each(call, self.process_context, records, self.keyed_backend, select)
        if out:
            self.emit(out)
        self.side_outputs.flush()

"""A subtask's input watermark, and the watermark an operator keeps across a restore.

`StatusWatermarkValve` (Flink's StatusWatermarkValve) is pure bookkeeping over the input
channels of one subtask, driven by the Watermark and WatermarkStatus events they deliver:

1. Each channel has a watermark (MIN_WATERMARK until its first one) and a status (active, or
   idle after a `WatermarkStatus(idle=True)` from its upstream subtask).
2. The subtask's input watermark is the minimum over the *active* channels; it only advances
   (a channel going back, or a smaller minimum, changes nothing). A watermark arriving on an
   idle channel is recorded but does not count until the channel is active again (sources
   send `WatermarkStatus(idle=False)` before their next record or watermark).
3. When every channel is idle the subtask is idle (its downstream must not wait for it); its
   watermark then advances to the maximum over all channels, as in Flink.

Each `on_*` call returns what to do: a new input watermark (int) or None, and a status change
for downstream (True: became idle, False: became active again) or None.

Two-input operators: every channel of both inputs is in the same valve, so the watermark is
the minimum of both inputs' watermarks (each the minimum over its channels).

`restore_watermark` / `snapshot_watermark`: the current watermark of an operator that decides
on it (`StreamOperator.stores_watermark`: process functions, sources and timestamp assigners,
window operators) is kept in its operator state (union list state `__watermark__` of
`(subtask index, watermark)`), so a restored job starts where the failed one stopped: timers
that fired are not in the checkpoint and do not fire again, and records that were late stay
late. At the same parallelism a subtask takes its own entry; after a rescale, the minimum over
all (never ahead of any old subtask).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidegate.runtime.internal_timers import MAX_WATERMARK, MIN_WATERMARK
from tidegate.state.descriptors import ListStateDescriptor

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "WATERMARK_STATE",
    "StatusWatermarkValve",
    "ValveOutput",
    "restore_watermark",
    "snapshot_watermark",
]

#: operator union list state holding `(subtask index, watermark)` of each subtask
WATERMARK_STATE = "__watermark__"


@dataclass(frozen=True, slots=True)
class ValveOutput:
    """What a valve step asks the subtask to do (both None: nothing)."""

    watermark: int | None = None
    #: True: the subtask became idle; False: it became active again
    idle: bool | None = None


_NOTHING = ValveOutput()


@dataclass
class StatusWatermarkValve:
    num_channels: int
    #: the input watermark last output (advances monotonically)
    current: int = MIN_WATERMARK
    watermarks: list[int] = field(init=False)
    idle: list[bool] = field(init=False)

    def __post_init__(self) -> None:
        self.watermarks = [MIN_WATERMARK] * self.num_channels
        self.idle = [False] * self.num_channels

    @property
    def is_idle(self) -> bool:
        """Every input channel is idle (and there is at least one)."""
        return bool(self.idle) and all(self.idle)

    def on_watermark(self, channel: int, watermark: int) -> ValveOutput:
        """Step 1/2: `channel` delivered `watermark`."""
        if watermark <= self.watermarks[channel]:
            return _NOTHING
        self.watermarks[channel] = watermark
        if self.idle[channel]:
            return _NOTHING
        return self._advance()

    def on_status(self, channel: int, idle: bool) -> ValveOutput:
        """Step 1/3: `channel`'s upstream became idle or active."""
        if self.idle[channel] == idle:
            return _NOTHING
        was_idle = self.is_idle
        self.idle[channel] = idle
        if idle:
            if self.is_idle:  # Step 3: the whole subtask is idle
                top = max(self.watermarks)
                return ValveOutput(top if top > self.current else None, True)
            return self._advance()  # the channel that held the minimum may be gone
        # active again: its watermark counts from now on (it may be behind: then it holds the
        # minimum back only from advancing further, the output never goes back)
        out = self._advance()
        return ValveOutput(out.watermark, False) if was_idle else out

    def _advance(self) -> ValveOutput:
        active = [w for w, idle in zip(self.watermarks, self.idle, strict=True) if not idle]
        if not active:
            return _NOTHING
        low = min(active)
        if low <= self.current:
            return _NOTHING
        self.current = low
        return ValveOutput(low)


def snapshot_watermark(operator_state: Any, subtask_index: int, watermark: int) -> None:
    """Store `watermark` (if any arrived) in the operator state for the next restore."""
    if watermark == MIN_WATERMARK:
        return
    state = operator_state.get_union_list_state(ListStateDescriptor(WATERMARK_STATE))
    state.update([(subtask_index, watermark)])


def restore_watermark(restored_operator_state: dict, subtask_index: int, parallelism: int) -> int:
    """The watermark this subtask starts from after a restore (MIN_WATERMARK if none), from
    the restored operator state (`RestoredOperatorState.operator_state`: name -> (mode,
    entries))."""
    _mode, entries = restored_operator_state.get(WATERMARK_STATE, (None, ()))
    by_subtask = dict(entries)
    if not by_subtask:
        return MIN_WATERMARK
    if len(by_subtask) == parallelism and subtask_index in by_subtask:
        return by_subtask[subtask_index]
    return min(by_subtask.values())

"""The "dynamic rules" job of the broadcast-state tests: a rules stream broadcast to a keyed
event stream, and the reference its committed output is compared with.

Rules: record i of the rules source is rule `i % NUM_RULES` with factor `rule + 2` (each rule
recurs, with the same factor, so the rules source runs as long as the events). Events: value v
of key `v % NUM_KEYS` needs rule `v % NUM_RULES`; the function emits
`key,v,v*factor,count` (count: the key's running count, keyed state). An event whose rule has
not arrived yet waits in keyed list state and is emitted when the rule arrives
(`apply_to_keyed_state`), so the output does not depend on how the two inputs interleave.

Before its first record, each subtask instance emits
`bstate,<parallelism>,<subtask>,<attempt>,<rule ids in its broadcast state>`: what it restored.
"""

from __future__ import annotations

import collections
from pathlib import Path

from tests.e2e.jobs import FailAtValues
from tests.support.environments import file_sink, job_environment
from tests.support.references import NUM_KEYS
from tidegate.datastream import KeyedBroadcastProcessFunction, StreamExecutionEnvironment
from tidegate.datastream.connectors.datagen import DataGeneratorSource
from tidegate.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

NUM_RULES = 7
RULES = MapStateDescriptor("rules")
PENDING = ListStateDescriptor("pending")
STATE_LINE = "bstate"


def factor(rule: int) -> int:
    return rule + 2


class ApplyRules(KeyedBroadcastProcessFunction):
    def open(self, runtime_context) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.pending = runtime_context.get_list_state(PENDING)
        self.header = (
            f"{STATE_LINE},{runtime_context.get_number_of_parallel_subtasks()},"
            f"{runtime_context.get_index_of_this_subtask()},"
            f"{runtime_context.get_attempt_number()}"
        )
        self.reported = False

    def _report(self, rules) -> list[str]:
        if self.reported:
            return []
        self.reported = True
        return [f"{self.header},{' '.join(str(r) for r in sorted(rules.keys()))}"]

    def _emit(self, value: int, rule_factor: int) -> str:
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        return f"{value % NUM_KEYS},{value},{value * rule_factor},{c}"

    def process_element(self, value, ctx):
        rules = ctx.get_broadcast_state(RULES)
        yield from self._report(rules)
        assert ctx.get_current_key() == value % NUM_KEYS
        rule_factor = rules.get(value % NUM_RULES)
        if rule_factor is None:
            self.pending.add(value)
        else:
            yield self._emit(value, rule_factor)

    def process_broadcast_element(self, value, ctx):
        rules = ctx.get_broadcast_state(RULES)
        yield from self._report(rules)
        rule, rule_factor = value
        rules.put(rule, rule_factor)
        out: list[str] = []

        def flush(key, pending) -> None:
            waiting = []
            for v in pending.get():
                known = rules.get(v % NUM_RULES)
                if known is None:
                    waiting.append(v)
                else:
                    out.append(self._emit(v, known))
            if waiting:
                pending.update(waiting)
            else:
                pending.clear()

        ctx.apply_to_keyed_state(PENDING, flush)
        yield from out


def rules_job(
    out: Path,
    checkpoints: Path,
    *,
    runner: str,
    n: int,
    parallelism: int,
    rate: float | None,
    interval_ms: int = 200,
    fail_at: dict[int, int] | None = None,
    config: dict[str, str] | None = None,
) -> StreamExecutionEnvironment:
    """events -> [fail] -> key_by ─┐
    rules (parallelism 1) -> broadcast(RULES) ─┴> ApplyRules (uid `rules`) -> FileSink"""
    env = job_environment(
        runner, checkpoints, parallelism=parallelism, interval_ms=interval_ms, config=config
    )
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1_000)
    events = env.from_source(
        DataGeneratorSource(lambda i: i, count=n, records_per_second=rate), None, "events"
    ).uid("events")
    if fail_at:
        events = events.map(FailAtValues(fail_at)).uid("fail")
    rules = (
        env.from_source(
            DataGeneratorSource(
                lambda i: (i % NUM_RULES, factor(i % NUM_RULES)),
                count=n,
                records_per_second=rate,
            ),
            None,
            "rules",
        )
        .uid("rule-source")
        .set_parallelism(1)
    )
    applied = (
        events.key_by(lambda v: v % NUM_KEYS)
        .connect(rules.broadcast(RULES))
        .process(ApplyRules())
        .uid("rules")
    )
    applied.sink_to(file_sink(out)).uid("sink")
    return env


def split_state_lines(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the `bstate` lines, the event lines)."""
    states = [line for line in lines if line.startswith(f"{STATE_LINE},")]
    return states, [line for line in lines if not line.startswith(f"{STATE_LINE},")]


def check_rules_applied_exactly_once(lines: list[str], n: int) -> None:
    """Event lines == the reference, record for record: every value 0..n-1 once, with its key
    and its rule's factor applied, and each key's counts exactly 1..n_k."""
    by_key: dict[int, list[int]] = collections.defaultdict(list)
    values = []
    for line in lines:
        key, value, derived, count = map(int, line.split(","))
        assert key == value % NUM_KEYS, line
        assert derived == value * factor(value % NUM_RULES), line
        by_key[key].append(count)
        values.append(value)
    duplicated = len(values) - len(set(values))
    lost = n - len(set(values))
    assert (lost, duplicated) == (0, 0), f"{lost} lost, {duplicated} duplicated"
    assert sorted(values) == list(range(n))
    for key, counts in by_key.items():
        assert sorted(counts) == list(range(1, len(counts) + 1)), f"key {key}: {counts[:20]}"


def parse_state_lines(lines: list[str]) -> list[tuple[int, int, int, set[int]]]:
    """(parallelism, subtask, attempt, rule ids) of each `bstate` line."""
    parsed = []
    for line in lines:
        _tag, p, subtask, attempt, rules = line.split(",")
        parsed.append((int(p), int(subtask), int(attempt), {int(r) for r in rules.split()}))
    return parsed

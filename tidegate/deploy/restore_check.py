"""The pre-flight restore check: what a restore of a snapshot into a job graph would do.

`check_restore(graph, metadata, directory, ...)` compares a job graph with a snapshot's
`_metadata` and returns a `RestoreReport`: per operator uid whether its state is restored
(which states, their kinds, key groups, sizes, and how they are spread over the new subtasks),
new (nothing in the snapshot), dropped (in the snapshot, operator gone) or refused (and why),
plus the sink transactions the restore will commit. Nothing is started; only `_metadata` and
the operator state sections of the state files are read (and every file with `verify`).

The rules are the restore's own, not a copy of them: the whole snapshot is planned with
`deploy.restore.plan_restore`, as the JobMaster plans it (so the verdict is whether its restore
would accept it), and then each operator alone on the snapshot restricted to it (so a refusal
is attributed to the operator it concerns). On top of the plan, the operators' declared states
(`deploy.state_probe`) are compared with the snapshot's names and kinds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tidegate.checkpoint.metadata import CheckpointMetadata
from tidegate.checkpoint.verification import verify_checkpoint
from tidegate.common.filesystems import NO_OPTIONS, FileSystems
from tidegate.deploy.restore import plan_restore
from tidegate.deploy.state_probe import DeclaredState, probe_declared_state
from tidegate.runtime.connector_operators import SinkOperator
from tidegate.runtime.plan import JobGraph
from tidegate.runtime.restore import CHANNEL_STATE_KEY, KeyedStateHandle
from tidegate.state.snapshot_format import (
    OperatorStateData,
    describe_key_groups,
    read_operator_state,
)

__all__ = ["OperatorReport", "RestoreReport", "check_restore"]

RESTORED, NEW, DROPPED, REFUSED = "restored", "new", "dropped", "refused"


@dataclass
class OperatorReport:
    uid: str
    name: str
    status: str
    #: subtasks in the snapshot / in the job (None: absent there)
    old_parallelism: int | None = None
    new_parallelism: int | None = None
    #: {"name", "scope" (keyed/operator), "kind" (a keyed state's kind, an operator state's
    #: mode), "in_snapshot", "declared" (by the job's operator; None for a dropped operator)}
    states: list[dict[str, Any]] = field(default_factory=list)
    #: non-empty key groups and bytes of keyed state in the snapshot
    key_groups: int = 0
    bytes: int = 0
    #: per new subtask with keyed state: {"subtask", "key_groups" ("[a, b]"), "bytes", "files"
    #: (old state files it reads), "channel_state" (it gets in-flight records back)}
    distribution: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: committables of a two-phase-commit sink the restore commits: {"checkpoint_id",
    #: "committable" (its repr, shortened)}
    pending_transactions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RestoreReport:
    path: str
    checkpoint_id: int | None
    is_savepoint: bool
    snapshot_max_parallelism: int | None
    max_parallelism: int | None
    operators: list[OperatorReport] = field(default_factory=list)
    #: why the restore as a whole is refused (empty: it would succeed)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def check_restore(
    graph: JobGraph,
    metadata: CheckpointMetadata,
    directory: str,
    *,
    allow_non_restored_state: bool = False,
    verify: bool = False,
    filesystems: FileSystems = NO_OPTIONS,
) -> RestoreReport:
    """What restoring `graph` from the snapshot in `directory` (with `metadata`) would do,
    reading the snapshot with the job's `filesystems` options."""
    report = RestoreReport(
        directory,
        metadata.checkpoint_id,
        metadata.is_savepoint,
        metadata.max_parallelism,
        graph.max_parallelism if graph.max_parallelism_configured else None,
    )
    # Step 1: the whole plan, as the JobMaster makes it (the authoritative verdict)
    max_p = _plan(
        graph, metadata, directory, allow_non_restored_state, report.problems, filesystems
    )
    # Step 2: what the snapshot holds, and what the job's functions declare
    snapshot = _SnapshotStates.read(metadata, directory, filesystems)
    kinds, modes = snapshot.kinds, snapshot.modes
    # (a refused max parallelism: probe with the job's own, which fits its parallelism)
    declared = probe_declared_state(graph, max_p or graph.max_parallelism, kinds, modes)
    # Step 3: one report per operator uid, of the job and of the snapshot
    graph_uids = {op.uid: (v, op) for v in graph.vertices.values() for op in v.operators}
    for uid, (vertex, op) in graph_uids.items():
        item = OperatorReport(uid, op.name, NEW, new_parallelism=vertex.parallelism)
        if uid in metadata.operators or uid in metadata.channel_state:
            _restored(item, graph, metadata, directory, snapshot, filesystems)
        _add_declared(item, declared[uid])
        if op.uid_generated and item.status != NEW:
            item.warnings.append(
                f"no explicit uid: {uid!r} was generated from the job's shape and changes when "
                "the job is edited; set .uid(...) on every stateful operator"
            )
        report.operators.append(item)
    for uid, entry in sorted(metadata.operators.items()):
        if uid not in graph_uids:
            item = OperatorReport(uid, entry.name, DROPPED)
            item.old_parallelism = entry.parallelism
            _snapshot_state_list(item, kinds.get(uid, {}), modes.get(uid, {}))
            for state in item.states:
                state["declared"] = None  # no operator declares anything for it
            if not allow_non_restored_state:
                item.reasons.append("the job has no operator with this uid")
            report.operators.append(item)
    # Step 4: the files themselves
    if verify:
        _verify(report, metadata, directory, filesystems)
    for item in report.operators:
        if item.status == REFUSED:
            new = [r for r in item.reasons if r not in report.problems]
            if new:
                report.problems.append(f"operator {item.uid!r}: {'; '.join(new)}")
    return report


def _plan(
    graph: JobGraph,
    metadata: CheckpointMetadata,
    directory: str,
    allow: bool,
    problems: list[str],
    filesystems: FileSystems,
) -> int | None:
    """The max parallelism the restore runs with, or None (and why in `problems`)."""
    try:
        return plan_restore(graph, metadata, directory, allow, filesystems=filesystems)[1]
    except Exception as exc:
        problems.append(_one_line(exc))
        return None


@dataclass
class _SnapshotStates:
    """Per uid: keyed state kinds, operator state modes, key groups and bytes of keyed state,
    each old subtask's operator state, and why it could not be read (if so)."""

    kinds: dict[str, dict[str, str]] = field(default_factory=dict)
    modes: dict[str, dict[str, str]] = field(default_factory=dict)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    operator_states: dict[str, list[OperatorStateData]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(
        cls, metadata: CheckpointMetadata, directory: str, filesystems: FileSystems
    ) -> _SnapshotStates:
        found = cls()
        for uid, entry in metadata.operators.items():
            key_groups, size = 0, 0
            kinds = found.kinds.setdefault(uid, {})
            modes = found.modes.setdefault(uid, {})
            states = found.operator_states.setdefault(uid, [])
            try:
                for handle in entry.handles():
                    index = handle.index
                    if index is None:
                        continue  # not a canonical state file
                    # incremental rocksdb state: the state file holds operator state only
                    kinds.update(handle.state_kinds)
                    key_groups += len(index.key_group_offsets)
                    size += sum(n for _, n in index.key_group_offsets.values())
                    if index.operator_offset is not None:
                        with filesystems.open(f"{directory}/{handle.file}") as f:
                            states.append(read_operator_state(f, index))
            except Exception as exc:
                found.unreadable[uid] = _one_line(exc)
            for state in states:
                modes.update({name: str(mode) for name, (mode, _) in state.items()})
            found.sizes[uid] = (key_groups, size)
        return found


def _restored(
    item: OperatorReport,
    graph: JobGraph,
    metadata: CheckpointMetadata,
    directory: str,
    snapshot: _SnapshotStates,
    filesystems: FileSystems,
) -> None:
    """Plan `uid` alone, so a refusal is attributed to it; then how its state is spread."""
    uid = item.uid
    entry = metadata.operators.get(uid)
    item.status = RESTORED
    if entry is not None:
        item.old_parallelism = entry.parallelism
        item.key_groups, item.bytes = snapshot.sizes[uid]
        item.pending_transactions = _pending_transactions(snapshot.operator_states[uid])
    _snapshot_state_list(item, snapshot.kinds.get(uid, {}), snapshot.modes.get(uid, {}))
    if uid in snapshot.unreadable:
        item.status = REFUSED
        item.reasons.append(snapshot.unreadable[uid])
        return
    only = metadata.replace(
        operators={uid: entry} if entry is not None else {},
        channel_state={u: e for u, e in metadata.channel_state.items() if u == uid},
    )
    try:
        plan, _max_p = plan_restore(graph, only, directory, False, filesystems=filesystems)
    except Exception as exc:
        item.status = REFUSED
        item.reasons.append(_one_line(exc))
        return
    _distribution(item, plan, graph)


def _snapshot_state_list(
    item: OperatorReport, kinds: dict[str, str], modes: dict[str, str]
) -> None:
    for name, kind in sorted(kinds.items()):
        item.states.append(_state(name, "keyed", kind, True))
    for name, mode in sorted(modes.items()):
        item.states.append(_state(name, "operator", mode, True))


def _state(name: str, scope: str, kind: str, in_snapshot: bool) -> dict[str, Any]:
    return {
        "name": name,
        "scope": scope,
        "kind": kind,
        "in_snapshot": in_snapshot,
        "declared": False,
    }


def _add_declared(item: OperatorReport, declared: DeclaredState) -> None:
    """Merge what the operator declares into its state list; a kind conflict refuses it."""
    if declared.error is not None:
        conflict = "cannot also be" in declared.error
        (item.reasons if conflict else item.warnings).append(declared.error)
        if conflict and item.status != DROPPED:
            item.status = REFUSED
    for scope, names in (("keyed", declared.keyed), ("operator", declared.operator)):
        for name, kind in names.items():
            found = next(
                (s for s in item.states if s["name"] == name and s["scope"] == scope), None
            )
            if found is None:
                item.states.append({**_state(name, scope, kind, False), "declared": True})
            else:
                found["declared"] = True
    if declared.connector:
        for s in item.states:
            s["declared"] = True


def _pending_transactions(states: list[OperatorStateData]) -> list[dict[str, Any]]:
    """The committables a two-phase-commit sink stored: its restore commits them. Entries are
    `(checkpoint id, committable)` or, with the writer index, `(writer, checkpoint id,
    committable)`; anything else is listed without a checkpoint id."""
    names = {SinkOperator.COMMITTABLES, getattr(SinkOperator, "LEGACY_COMMITTABLES", None)}
    found = []
    for state in states:
        for name in sorted(n for n in names if n in state):
            for entry in state[name][1]:
                cid = entry[-2] if isinstance(entry, tuple) and len(entry) in (2, 3) else None
                if type(cid) is int:
                    found.append({"checkpoint_id": cid, "committable": _short(entry[-1])})
                else:
                    found.append({"checkpoint_id": None, "committable": _short(entry)})
    return found


def _distribution(item: OperatorReport, plan: dict[tuple[int, int], Any], graph: JobGraph) -> None:
    """Key groups, bytes and files each new subtask of a restored operator reads."""
    vertex, _op = graph.operator(item.uid)
    for i in range(vertex.parallelism):
        restored = plan.get((vertex.vertex_id, i), {})
        state = restored.get(item.uid)
        if state is None or not state.keyed:
            continue
        size = 0
        for handle in state.keyed:
            if isinstance(handle, KeyedStateHandle):  # incremental handles: sizes unknown here
                offsets = handle.index.key_group_offsets
                size += sum(n for kg, (_, n) in offsets.items() if kg in handle.key_groups)
        ranges = [h.key_groups for h in state.keyed]
        item.distribution.append(
            {
                "subtask": i,
                "key_groups": describe_key_groups(range(ranges[0].start, ranges[-1].stop)),
                "bytes": size,
                "files": len(state.keyed),
                "channel_state": CHANNEL_STATE_KEY in restored,
            }
        )


def _verify(
    report: RestoreReport, metadata: CheckpointMetadata, directory: str, filesystems: FileSystems
) -> None:
    uids = {i.uid for i in report.operators if i.status in (RESTORED, REFUSED)}
    verification = verify_checkpoint(metadata, directory, uids=uids, filesystems=filesystems)
    for problem in verification.problems:
        item = next(i for i in report.operators if i.uid == problem.artifact.uid)
        item.status = REFUSED
        item.reasons.append(f"{problem.path} {problem.detail}")


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())

"""The soak's short version on Spark (`bench/soak.py --quick`): 32 faults of eight kinds
`tidegate chaos` injects (`soak.SOAK_KINDS`), into one job with keyed state, event-time
windows, broadcast state and an interval join, each into an exactly-once FileSink, run in
segments restored from each other's savepoints at parallelism 2, 3, 1, 4 with aligned and
unaligned checkpoints and the RocksDB and hashmap incremental backends alternating, then
drained. Its committed output equals the plain-Python reference record for record, and no
segment leaves in-progress files or files the orphan sweep would delete. (The full soak,
1,000 faults: bench/README.md.)"""

from __future__ import annotations

from bench import soak
from tidegate.runtime.faults import FaultKind


def test_soak_quick_loses_and_duplicates_nothing(spark, tmp_path):
    summary = soak.main(
        ["--quick", "--runner", "spark", "--work-dir", str(tmp_path / "work"),
         "--out", str(tmp_path / "soak.json")],
        spark,
    )  # fmt: skip
    segments = summary["segments"]
    assert [s["parallelism"] for s in segments] == [2, 3, 1, 4, 2]  # the last one drains
    assert [s["checkpoints"] for s in segments[:4]] == ["aligned", "unaligned"] * 2
    assert {s["backend"] for s in segments} == set(soak.BACKENDS)
    for s in segments:
        # every planned fault happened, but a `restore` fault, which needs a later restart
        assert all(f.startswith("restore ") for f in s["not_injected"]), s
        assert s["faults_injected"] + len(s["not_injected"]) == s["faults_planned"], s
        assert s["restarts"] == s["attempts_with_faults"], s
        assert (s["leftover_files"], s["orphans"]) == ([], []), s
    assert set(summary["by_kind"]) >= set(soak.SOAK_KINDS) - {FaultKind.RESTORE}
    assert sum(s["faults_planned"] for s in segments) == 32
    for pipeline in summary["pipelines"]:
        assert pipeline["reference_records"] > 0
        assert (pipeline["lost"], pipeline["duplicated"], pipeline["unexpected"]) == (0, 0, 0)
        assert pipeline["faulty_records"] == pipeline["reference_records"]

"""State TTL end to end on Spark: a keyed job whose output depends on expiry produces exactly
the reference output, also when it fails and restores TTL state from a checkpoint."""

from __future__ import annotations

from tests.e2e.ttl_jobs import BLOCK, reference, ttl_job
from tests.support.output import committed_lines
from tests.support.waiting import resolved


def test_expired_state_is_never_returned_and_ttl_state_survives_a_restore(spark, tmp_path):
    n = 6 * BLOCK
    # attempt 0 fails in the 3rd block, attempt 1 just after the 4th jump: both restore TTL
    # state written before a jump (expired on the next record) and within a block (alive)
    env = ttl_job(tmp_path / "out", tmp_path / "chk", n=n, rate=2_000, fail_at={0: 2_600, 1: 4_050})
    client = env.execute_async("ttl")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)
    stats = client.jobmaster.stats
    assert stats.restarts == 2 and stats.restored_from is not None
    lines = committed_lines(tmp_path / "out")
    expected = reference(n)
    assert len(lines) == len(set(lines)) == n  # nothing lost or duplicated
    assert sorted(lines) == sorted(expected)
    # expiry shaped the output: each jump made every key start over, nothing else did
    fresh = [line for line in expected if line.endswith(",-")]
    assert len(fresh) == 13 * (n // BLOCK)

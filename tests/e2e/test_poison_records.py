"""The dead-letter policy end to end on Spark: a parse map routing malformed records to its
DEAD_LETTERS side output, a keyed counting stage behind it, both outputs in exactly-once
FileSinks; the parse map's slot is killed (kill -9) in the first attempt and the keyed stage
raises in the second. Both outputs equal references computed from the generator, record for
record: no dead letter lost or doubled, no parsed record lost, none dead-lettered twice."""

from __future__ import annotations

from tests.e2e.dead_letter_jobs import N, dead_letter_job, message
from tests.e2e.jobs import check_restarts
from tests.e2e.timer_jobs import FailurePlan
from tests.support.output import committed_lines
from tests.support.waiting import resolved


def test_dead_letters_are_exactly_once_through_a_kill_and_an_exception(spark, tmp_path):
    parse_plan = FailurePlan({0: ("kill", "record", 1_201)})
    # both in the first source split (0..1499, generated in order): the exception comes after
    # the kill, in the attempt that restored from it
    count_plan = FailurePlan({1: ("raise", "record", 1_450)})
    env = dead_letter_job(tmp_path, parse_plan, count_plan)
    client = env.execute_async("dead letters under failures")
    resolved(client.get_job_execution_result(), "the job to finish", timeout=300)

    check_restarts(client, kills=1, exceptions=(1,))
    malformed = [message(i) for i in range(N) if not message(i).isdigit()]
    assert sorted(committed_lines(tmp_path / "dead")) == sorted(
        f"{m!r}|ValueError|Parse" for m in malformed
    )
    assert sorted(committed_lines(tmp_path / "out")) == sorted(
        message(i) for i in range(N) if message(i).isdigit()
    )

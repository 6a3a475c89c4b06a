"""Dead letters (tidegate's, not PyFlink's): route the records a function raises on to a side
output instead of failing the job.

    from tidegate.datastream.dead_letters import DEAD_LETTERS, DeadLetter

    parsed = raw.map(parse)                          # parse raises on a malformed record
    parsed.get_side_output(DEAD_LETTERS).sink_to(dead_letter_sink)   # DeadLetter records
    parsed.key_by(...)...                            # only the records parse succeeded on

Reading `DEAD_LETTERS` of a `map`, `flat_map`, `filter`, `process` or keyed `reduce` is the
policy: that operator no longer fails on an exception of its function but emits a `DeadLetter`
(the record, the operator's name, the exception's type, message and traceback) with the
record's timestamp, and drops whatever that record had emitted. Without it an exception fails
the job (Flink's behaviour: restart and restore). Dead letters are a stream like any other:
exactly once into an exactly-once sink. See docs/guide.md, "Records a function cannot handle".
"""

from __future__ import annotations

from tidegate.datastream.output_tag import OutputTag
from tidegate.runtime.dead_letters import DEAD_LETTER_TAG_ID, DeadLetter

__all__ = ["DEAD_LETTERS", "DeadLetter"]

#: the dead-letter side output of an operator: `stream.get_side_output(DEAD_LETTERS)`
DEAD_LETTERS = OutputTag(DEAD_LETTER_TAG_ID)

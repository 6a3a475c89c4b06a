"""The optional durable consumer that shows how far a NATS JetStream split got (monitoring
only, `set_durable_consumer`): its ack floor follows the completed checkpoints.

The source reads with ephemeral consumers of its own and keeps its position in the checkpoint;
this durable consumer is never read for records. When a reader starts, the split's durable
consumer is created anew to deliver the messages after the split's (restored) position; when a
checkpoint completes, the reader acknowledges it (AckPolicy ALL) up to the checkpoint's
sequence: it fetches the consumer's messages with headers only (no payloads) up to that
sequence and acknowledges the last one, which acknowledges all before it. `nats consumer info
<stream> <name>` then shows the ack floor (the last completed checkpoint's sequence; 0 until
the first checkpoint after a start that covers a new message) and the messages still to process
(pending: not yet covered by a checkpoint, ack pending: read beyond the last one).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

__all__ = ["ProgressConsumer", "durable_name"]

#: the messages one fetch of the progress consumer returns at most (headers only)
ACK_FETCH = 500
#: how long a fetched, unacknowledged message waits before the server delivers it again: long,
#: as the messages beyond a checkpoint's sequence wait for the next checkpoint
ACK_WAIT_S = 3600.0
#: a fetch that the consumer's pending count says has messages waits at most this long
FETCH_TIMEOUT_S = 1.0

#: the description that marks a durable consumer as one of these (only these are re-created)
DESCRIPTION = "tidegate source progress (acknowledged up to completed checkpoints)"
#: characters a consumer name must not hold, and their replacements in `durable_name`
_SUBJECT_TOKENS = {".": "_", "*": "+", ">": "#"}
_INVALID_NAME = re.compile(r"[\s.*>/\\]")


def durable_name(base: str, subject: str | None) -> str:
    """The durable consumer of the split reading `subject` (None: the whole stream): `base`
    itself, or `base` and the subject with `.`, `*`, `>` replaced by `_`, `+`, `#`
    (`orders.eu.*` -> `<base>_orders_eu_+`)."""
    if subject is None:
        return base
    return f"{base}_" + "".join(_SUBJECT_TOKENS.get(c, c) for c in subject)


def check_durable_base(base: str) -> None:
    """Raise ValueError if `base` cannot start a consumer name."""
    if not base or _INVALID_NAME.search(base):
        raise ValueError(
            f"invalid durable consumer name {base!r}: a NATS consumer name must be non-empty "
            f"without whitespace, '.', '*', '>', '/' or '\\'"
        )


class ProgressConsumer:
    """One split's durable consumer. Its coroutines run on the reader's client loop."""

    def __init__(self, subscription: Any) -> None:
        self._sub = subscription
        #: fetched messages beyond the last acknowledged sequence, for a later checkpoint
        self._held: list[Any] = []

    @classmethod
    async def start(cls, js: Any, stream: str, name: str, subject: str | None, position: int):
        """(Re)create durable `name` delivering the split's messages after `position` (a
        consumer cannot be moved: an existing one is deleted first, if it is one of these:
        a consumer of another application with that name is refused, not deleted)."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
        from nats.js.errors import NotFoundError

        with contextlib.suppress(NotFoundError):  # none yet
            existing = await js.consumer_info(stream, name)
            if existing.config.description != DESCRIPTION:
                raise ValueError(
                    f"stream {stream} already has a consumer {name!r} that is not a tidegate "
                    f"progress consumer (its description is {existing.config.description!r}): "
                    f"give the source another set_durable_consumer name"
                )
            await js.delete_consumer(stream, name)
        config = ConsumerConfig(
            durable_name=name,
            description=DESCRIPTION,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=position + 1,
            ack_policy=AckPolicy.ALL,
            ack_wait=ACK_WAIT_S,
            max_ack_pending=-1,  # unlimited: messages beyond a checkpoint wait unacknowledged
            headers_only=True,
            filter_subject=subject,
        )
        await js.add_consumer(stream, config)
        return cls(await js.pull_subscribe_bind(name, stream=stream))

    async def ack_through(self, sequence: int) -> None:
        """Acknowledge every message up to stream sequence `sequence`: fetch until a message
        beyond it or none pending, acknowledge the last one at or before it (and wait for the
        server to confirm)."""
        from nats.errors import TimeoutError as NatsTimeoutError

        last, beyond = None, []
        candidates = self._held
        while True:
            for msg in candidates:
                if msg.metadata.sequence.stream <= sequence:
                    if last is None or msg.metadata.sequence.stream > last.metadata.sequence.stream:
                        last = msg
                else:
                    beyond.append(msg)
            if beyond or (await self._sub.consumer_info()).num_pending == 0:
                break
            try:
                candidates = await self._sub.fetch(ACK_FETCH, timeout=FETCH_TIMEOUT_S)
            except (TimeoutError, NatsTimeoutError):
                break
        self._held = beyond
        if last is not None:
            await last.ack_sync()

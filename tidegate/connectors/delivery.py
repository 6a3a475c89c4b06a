"""PyFlink's DeliveryGuarantee (`pyflink.datastream.connectors.base`)."""

from __future__ import annotations

import enum

__all__ = ["DeliveryGuarantee"]


class DeliveryGuarantee(enum.Enum):
    """What a sink promises about each record after failures and restarts."""

    #: every record exactly once, visible once the checkpoint that covers it completed
    EXACTLY_ONCE = "exactly-once"
    #: no record lost (written by each checkpoint); records may be duplicated on a restart
    AT_LEAST_ONCE = "at-least-once"
    #: records may be lost or duplicated
    NONE = "none"

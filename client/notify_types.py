"""The notification types: a job's rules (``NotifyPolicy``), an owner's settings, and
the deliveries of runs' ends to webhooks (docs/notifications.md). Re-exported by
``shardcron.client.types``, whose ``JobSpec`` carries a ``NotifyPolicy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifyPolicy:
    """Where a job's notifications go, and which run ends send one (docs/notifications.md).

    Each rule that a run's end matches sends one signed JSON POST to ``webhook_url``."""

    webhook_url: str
    on_failure: bool = False  # every FAILED or TIMED_OUT run, each attempt
    on_recovery: bool = False  # a SUCCEEDED run after failed ones
    on_dead_letter: bool = False  # a run that failed with no attempt left
    on_consecutive_failures: int = 0  # the failure streak reached this; 0 = off
    on_late: timedelta | None = None  # started more than this after it was due; None = off
    on_missed: bool = False  # ended MISSED or SKIPPED
    slack: bool = False  # a Slack-compatible body ({"text": ...}) instead of the JSON record

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules set, as the CLI's ``--notify-on`` names them."""
        out = [
            name
            for name, on in (
                ("failure", self.on_failure),
                ("recovery", self.on_recovery),
                ("dead-letter", self.on_dead_letter),
                ("missed", self.on_missed),
            )
            if on
        ]
        if self.on_consecutive_failures:
            out.append(f"consecutive={self.on_consecutive_failures}")
        if self.on_late is not None:
            out.append(f"late={int(self.on_late.total_seconds())}s")
        return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifySettings:
    """An owner's notification settings as it may read them: never its secret."""

    defaults: NotifyPolicy | None = None  # the rules of its jobs that have none of their own
    secret_set: bool = False  # its deliveries are signed


class NotifyRule(StrEnum):
    """Which rule of a job's ``NotifyPolicy`` a delivery was made for."""

    FAILURE = "FAILURE"
    RECOVERY = "RECOVERY"
    DEAD_LETTER = "DEAD_LETTER"
    CONSECUTIVE_FAILURES = "CONSECUTIVE_FAILURES"
    LATE = "LATE"
    MISSED = "MISSED"


class DeliveryStatus(StrEnum):
    PENDING = "PENDING"  # not sent yet, or tried again at ``next_attempt_at``
    DELIVERED = "DELIVERED"  # the receiver answered 2xx
    DROPPED = "DROPPED"  # attempts or time ran out, or the URL was refused


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One notification of one run's end to one webhook: written in the commit of the
    run's final record, sent (and retried) by the poller that owns the run's shard."""

    id: str  # also the X-Shardcron-Delivery header, for receivers to deduplicate on
    owner: str
    job_id: str
    run_id: str
    shard: int
    rule: NotifyRule
    reason: str  # why the rule matched, in words
    webhook_url: str
    body: bytes  # the exact bytes sent and signed
    created_at: datetime
    status: DeliveryStatus = DeliveryStatus.PENDING
    attempts: int = 0
    next_attempt_at: datetime | None = None
    last_attempt_at: datetime | None = None
    last_error: str = ""
    delivered_at: datetime | None = None

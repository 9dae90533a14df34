"""The codec of notifications: a job's ``NotifyPolicy`` and its webhook ``Delivery``
records, both ways. Structure only; what the server refuses (a URL's scheme, an address
the node will not call) is ``coordinator/notify/rules.py``'s to say."""

from __future__ import annotations

from shardcron.client.codec.common import (
    ProtoEnum,
    build,
    get_duration,
    get_required_time,
    get_time,
    non_negative,
    set_duration,
    set_time,
)
from shardcron.client.types import (
    Delivery,
    DeliveryStatus,
    NotifyPolicy,
    NotifyRule,
    NotifySettings,
)
from shardcron.v1 import jobs_pb2, types_pb2

NOTIFY_RULE = ProtoEnum(NotifyRule, types_pb2.NotifyRule, "NOTIFY_RULE_")
DELIVERY_STATUS = ProtoEnum(DeliveryStatus, types_pb2.DeliveryStatus, "DELIVERY_STATUS_")


def notify_to_proto(n: NotifyPolicy, field: str = "spec.notify") -> types_pb2.NotifyPolicy:
    msg = build(
        types_pb2.NotifyPolicy,
        field,
        webhook_url=n.webhook_url,
        on_failure=n.on_failure,
        on_recovery=n.on_recovery,
        on_dead_letter=n.on_dead_letter,
        on_consecutive_failures=n.on_consecutive_failures,
        on_missed=n.on_missed,
        slack=n.slack,
    )
    set_duration(msg, "on_late", n.on_late, field)
    return msg


def notify_from_proto(msg: types_pb2.NotifyPolicy, field: str = "spec.notify") -> NotifyPolicy:
    return NotifyPolicy(
        webhook_url=msg.webhook_url,
        on_failure=msg.on_failure,
        on_recovery=msg.on_recovery,
        on_dead_letter=msg.on_dead_letter,
        on_consecutive_failures=non_negative(
            msg.on_consecutive_failures, f"{field}.on_consecutive_failures"
        ),
        on_late=get_duration(msg, "on_late", field),
        on_missed=msg.on_missed,
        slack=msg.slack,
    )


def notify_settings_to_proto(s: NotifySettings) -> jobs_pb2.NotifySettings:
    msg = jobs_pb2.NotifySettings(secret_set=s.secret_set)
    if s.defaults is not None:
        msg.defaults.CopyFrom(notify_to_proto(s.defaults, "defaults"))
    return msg


def notify_settings_from_proto(msg: jobs_pb2.NotifySettings) -> NotifySettings:
    defaults = notify_from_proto(msg.defaults, "defaults") if msg.HasField("defaults") else None
    return NotifySettings(defaults=defaults, secret_set=msg.secret_set)


def delivery_to_proto(d: Delivery) -> types_pb2.Delivery:
    """A delivery as replies show it: its body is not sent back (it is the run's record,
    which GetRun shows)."""
    msg = types_pb2.Delivery(
        id=d.id,
        job_id=d.job_id,
        run_id=d.run_id,
        rule=NOTIFY_RULE.to_proto(d.rule),
        reason=d.reason,
        status=DELIVERY_STATUS.to_proto(d.status),
        attempts=d.attempts,
        last_error=d.last_error,
        webhook_url=d.webhook_url,
    )
    set_time(msg, "created_at", d.created_at)
    set_time(msg, "next_attempt_at", d.next_attempt_at)
    set_time(msg, "last_attempt_at", d.last_attempt_at)
    set_time(msg, "delivered_at", d.delivered_at)
    return msg


def delivery_from_proto(msg: types_pb2.Delivery, field: str = "delivery") -> Delivery:
    """A delivery as a client reads it (no owner, shard or body: replies carry none)."""
    return Delivery(
        id=msg.id,
        owner="",
        job_id=msg.job_id,
        run_id=msg.run_id,
        shard=0,
        rule=NOTIFY_RULE.from_proto(msg.rule, f"{field}.rule"),
        reason=msg.reason,
        webhook_url=msg.webhook_url,
        body=b"",
        created_at=get_required_time(msg, "created_at", field),
        status=DELIVERY_STATUS.from_proto(msg.status, f"{field}.status"),
        attempts=msg.attempts,
        next_attempt_at=get_time(msg, "next_attempt_at", field),
        last_attempt_at=get_time(msg, "last_attempt_at", field),
        last_error=msg.last_error,
        delivered_at=get_time(msg, "delivered_at", field),
    )

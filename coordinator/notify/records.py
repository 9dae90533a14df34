"""The row layout of a ``Delivery``, shared by both stores (as ``rows`` is for jobs and
runs): times as integer microseconds, a missing time as the store's ``null``."""

from __future__ import annotations

from typing import Any

from shardcron.client.types import Delivery, DeliveryStatus, NotifyRule
from shardcron.coordinator.rows import _dt, _us

DELIVERY_COLS = (
    "id, owner, job_id, run_id, shard, rule, reason, webhook_url, body, created_at, status,"
    " attempts, next_attempt_at, last_attempt_at, last_error, delivered_at"
)
DELIVERY_COL_COUNT = DELIVERY_COLS.count(",") + 1


def delivery_row(d: Delivery, null: Any = None) -> tuple[Any, ...]:
    def t(value: Any) -> Any:
        return null if value is None else _us(value)

    return (
        d.id,
        d.owner,
        d.job_id,
        d.run_id,
        d.shard,
        str(d.rule),
        d.reason,
        d.webhook_url,
        d.body,
        _us(d.created_at),
        str(d.status),
        d.attempts,
        t(d.next_attempt_at),
        t(d.last_attempt_at),
        d.last_error,
        t(d.delivered_at),
    )


def row_delivery(row: Any, null: Any = None) -> Delivery:
    def t(value: Any) -> Any:
        return None if value is None or value == null else _dt(value)

    (id_, owner, job_id, run_id, shard, rule, reason, url, body, created, status, attempts,
     next_at, last_at, last_error, delivered) = row  # fmt: skip
    return Delivery(
        id=id_,
        owner=owner,
        job_id=job_id,
        run_id=run_id,
        shard=shard,
        rule=NotifyRule(rule),
        reason=reason,
        webhook_url=url,
        body=bytes(body),
        created_at=_dt(created),
        status=DeliveryStatus(status),
        attempts=attempts,
        next_attempt_at=t(next_at),
        last_attempt_at=t(last_at),
        last_error=last_error or "",
        delivered_at=t(delivered),
    )

"""Notification deliveries, and owners' notification settings, on Cassandra (``schema``: ``deliveries`` and
``pending_deliveries``).

A poller's commit writes a run's deliveries in ``P_JOBS``, the phase before the final
records of existing runs (``writes``), and keeps that run's state out of the early
writes: once a run's end is durable, its deliveries are. A process that dies between
the two leaves deliveries of a run whose end was not recorded; its worker offers the
result again to the shard's next owner (it forgets a result only once acknowledged),
which ends the run the same way and makes deliveries of the same ids, already there.

Each record is inserted with the write timestamp ``_INSERTED`` (the epoch's first
microsecond), and each attempt's outcome written as of now: a replayed insert, older
than every outcome, never resets a delivery that was sent, and a delivery's pending
row, once deleted, stays deleted, with no read and no lightweight transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardcron.client.types import Delivery, DeliveryStatus, Page
from shardcron.coordinator.cassandra.session import Cql
from shardcron.coordinator.cassandra.statements import NONE
from shardcron.coordinator.cassandra.writes import P_JOBS, Writes, now_us
from shardcron.coordinator.notify.records import delivery_row, row_delivery
from shardcron.coordinator.notify.settings import OwnerSettings, policy_from_json, policy_to_json
from shardcron.coordinator.rows import _dt, _us
from shardcron.coordinator.store_rules import (
    PageKind,
    clamp_page_size,
    make_page,
    page_token_after,
)

_AFTER_ALL = "\U0010ffff"  # sorts after every id: a first page starts below it
_INSERTED = 1  # the write timestamp of a record's insert (module docstring)


def plan_deliveries(cql: Cql, writes: Writes, deliveries: Sequence[Delivery]) -> None:
    """Adds the deliveries' rows to a commit's writes (module docstring)."""
    for d in deliveries:
        row = delivery_row(d, NONE)
        stmt = cql.bind("insert_delivery", (*row, _INSERTED))
        writes.add(P_JOBS, ("deliveries", d.owner), stmt)
        stmt = cql.bind("insert_pending", (d.shard, d.id, d.owner, _INSERTED))
        writes.add(P_JOBS, ("pending_deliveries", d.shard), stmt, 120)
        writes.ordered_jobs.add(d.job_id)


async def save_deliveries(cql: Cql, deliveries: Sequence[Delivery]) -> None:
    at = now_us()
    calls = []
    for d in deliveries:
        row = delivery_row(d, NONE)
        values = (at, *row[10:], d.owner, d.id)  # status .. delivered_at
        calls.append(cql.exec(cql.bind("update_delivery", values)))
        if d.status != DeliveryStatus.PENDING:
            calls.append(cql.exec(cql.bind("delete_pending", (at, d.shard, d.id))))
    await cql.all_written(calls)


async def pending_deliveries(cql: Cql, shard: int, limit: int) -> list[Delivery]:
    rows = await cql.all(cql.ps["pending"], (shard, max(1, limit)))
    by_owner: dict[str, list[str]] = {}
    for delivery_id, owner in rows:
        by_owner.setdefault(owner, []).append(delivery_id)
    parts = await cql.gather(
        cql.in_("select_deliveries", ids, owner) for owner, ids in by_owner.items()
    )
    found = [_decode(row) for part in parts for row in part]
    # a record past its TTL, or already final, has nothing left to send
    return sorted((d for d in found if d.status == DeliveryStatus.PENDING), key=lambda d: d.id)


async def list_deliveries(
    cql: Cql, owner: str, *, job_id: str, page_size: int, page_token: str
) -> Page[Delivery]:
    size = clamp_page_size(page_size)
    after = page_token_after(PageKind.DELIVERIES, page_token) or _AFTER_ALL
    if job_id:
        rows = await cql.all(cql.ps["job_deliveries"], (owner, after, job_id, size + 1))
    else:
        rows = await cql.all(cql.ps["owner_deliveries"], (owner, after, size + 1))
    items = [_decode(row) for row in rows]
    return make_page(PageKind.DELIVERIES, items, size, lambda d: d.id)


async def put_owner_settings(cql: Cql, settings: OwnerSettings) -> None:
    at = NONE if settings.updated_at is None else _us(settings.updated_at)
    values = (settings.owner, policy_to_json(settings.notify_defaults), settings.notify_secret, at)
    await cql.exec(cql.bind("put_owner_settings", values))


async def get_owner_settings(cql: Cql, owner: str) -> OwnerSettings | None:
    rows = await cql.all(cql.ps["owner_settings"], (owner,))
    return _settings(rows[0]) if rows else None


async def list_owner_settings(cql: Cql) -> list[OwnerSettings]:
    return [_settings(row) for row in await cql.all(cql.ps["all_owner_settings"], ())]


def _settings(row: Any) -> OwnerSettings:
    owner, notify, secret, updated = row
    return OwnerSettings(
        owner=owner,
        notify_defaults=policy_from_json(notify or ""),
        notify_secret=secret or "",
        updated_at=None if updated in (None, NONE) else _dt(updated),
    )


def _decode(row: Any) -> Delivery:
    return row_delivery(row, NONE)

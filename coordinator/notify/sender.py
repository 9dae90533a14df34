"""The poller's sender of webhook deliveries.

It holds the PENDING deliveries of the shards its poller owns: those each turn made,
handed to it once they are durable (``made``), and those the store holds for its
shards, read as soon as its poller owns a shard (at start, after a move) and again
every ``rescan`` (so what a killed node, or a shard's earlier owner, left unsent is
sent, and what an outcome that failed to be written left behind). Each due delivery is POSTed once at a time, at most
``concurrency`` at once, signed (``signing``), to an address the node may call
(``addresses``), without following redirects; each attempt's outcome is written
(``JobStore.save_deliveries``) before the next is planned:

- a 2xx answer: DELIVERED;
- anything else (another status, a timeout, a refused connection): tried again after
  ``initial_backoff * 2^(attempts-1)`` (at most ``max_backoff``, with up to a fifth
  more at random), until ``max_attempts`` or ``give_up_after`` since it was made,
  then DROPPED;
- an address the node refuses: DROPPED at once (asking again will not change it).

Counted in ``shardcron_notify_deliveries_total{outcome}``: sent, failed (an attempt),
dropped. A delivery whose shard moved away is left to its new owner. During a move
both may send it once: receivers deduplicate on ``X-Shardcron-Delivery``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from shardcron.client.types import Delivery, DeliveryStatus
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.notify.addresses import GuardedResolver, RefusedAddress, literal_refusal
from shardcron.coordinator.notify.signing import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature,
)
from shardcron.coordinator.store import JobStore

log = logging.getLogger("shardcron.notify")

_OWNERSHIP_CHECK = 0.5  # seconds: how soon a shard newly owned has its pending ones read


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifyConfig:
    """How a node sends its notifications."""

    allow_private: bool = False  # webhooks on loopback, link-local, private addresses
    secrets: Mapping[str, bytes] | None = None  # owner -> signing secret
    concurrency: int = 32  # attempts in flight at once
    timeout: timedelta = timedelta(seconds=10)  # one attempt, connect to last byte
    initial_backoff: timedelta = timedelta(seconds=1)
    max_backoff: timedelta = timedelta(hours=1)
    max_attempts: int = 20
    give_up_after: timedelta = timedelta(hours=24)
    rescan: timedelta = timedelta(seconds=60)  # how often every owned shard's are read again


def retry_at(d: Delivery, now: datetime, config: NotifyConfig) -> datetime | None:
    """When a delivery whose attempt just failed is tried next; None: drop it."""
    if d.attempts >= config.max_attempts:
        return None
    backoff = min(config.max_backoff, config.initial_backoff * 2 ** max(0, d.attempts - 1))
    at = now + backoff * (1 + random.random() / 5)
    if at - d.created_at > config.give_up_after:
        return None
    return at


class Sender:
    def __init__(
        self,
        store: JobStore,
        *,
        owns: Callable[[int], bool],
        config: NotifyConfig,
        metrics: Metrics,
        secrets: Callable[[str], bytes | None] | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        """``secrets``: an owner's signing secret (``settings.OwnerSettingsBook``); by
        default those of ``config.secrets``. ``resolver``: the names' resolver the
        ``GuardedResolver`` asks (by default aiohttp's)."""
        self._resolver = resolver
        self._store = store
        self._secrets = secrets or (lambda owner: (config.secrets or {}).get(owner))
        self._owns = owns
        self._config = config
        self._metrics = metrics
        self._pending: dict[str, Delivery] = {}
        self._flying: set[str] = set()
        self._slots = asyncio.Semaphore(config.concurrency)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._attempts: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._stopping = False

    def start(self) -> None:
        resolver = GuardedResolver(allow_private=self._config.allow_private, inner=self._resolver)
        connector = aiohttp.TCPConnector(resolver=resolver, limit=self._config.concurrency)
        timeout = aiohttp.ClientTimeout(total=self._config.timeout.total_seconds())
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, trust_env=False, auto_decompress=False
        )
        self._task = asyncio.create_task(self._loop(), name="notify-sender")

    async def stop(self) -> None:
        # the loop also ends by itself once told: on Python 3.11 a cancel that lands as
        # its wait's timeout fires comes out of ``wait_for`` as that timeout, which the
        # loop takes for a plain wake-up, and it would go on for ever
        self._stopping = True
        self._wake.set()
        tasks = [t for t in (self._task, *self._attempts) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def made(self, deliveries: list[Delivery]) -> None:
        """The poller's turn wrote these: send them now."""
        for d in deliveries:
            self._pending.setdefault(d.id, d)
        self._wake.set()

    async def _loop(self) -> None:
        rescan_at = 0.0
        scanned: set[int] = set()  # the owned shards whose pending ones were read
        while not self._stopping:
            owned = {s for s in range(self._store.shard_count) if self._owns(s)}
            if time.monotonic() >= rescan_at:
                rescan_at = time.monotonic() + self._config.rescan.total_seconds()
                scanned = set()
            if owned - scanned:
                with contextlib.suppress(Exception):
                    await self._read_pending(sorted(owned - scanned))
            scanned = owned
            now = datetime.now(UTC)
            soonest = min(_OWNERSHIP_CHECK, rescan_at - time.monotonic())
            for d in list(self._pending.values()):
                if d.id in self._flying:
                    continue
                if not self._owns(d.shard):
                    del self._pending[d.id]  # its shard's owner sends it
                    continue
                if d.next_attempt_at is not None and d.next_attempt_at > now:
                    soonest = min(soonest, (d.next_attempt_at - now).total_seconds())
                    continue
                self._flying.add(d.id)
                task = asyncio.create_task(self._attempt(d))
                self._attempts.add(task)
                task.add_done_callback(self._attempts.discard)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.01, soonest))

    async def _read_pending(self, shards: list[int]) -> None:
        for shard in shards:
            try:
                found = await self._store.pending_deliveries(shard)
            except Exception as error:
                log.warning("could not read the pending deliveries of shard %s: %s", shard, error)
                continue
            for d in found:
                if d.id not in self._flying:
                    self._pending[d.id] = d

    async def _attempt(self, d: Delivery) -> None:
        try:
            async with self._slots:
                outcome = await self._send(d)
            try:
                await self._store.save_deliveries([outcome])
            except Exception as error:  # kept as it was: tried again, or read again
                log.warning("delivery %s: its outcome was not written: %s", d.id, error)
                outcome = replace(
                    d, next_attempt_at=datetime.now(UTC) + self._config.initial_backoff
                )
            if outcome.status == DeliveryStatus.PENDING:
                self._pending[d.id] = outcome
            else:
                self._pending.pop(d.id, None)
        except Exception as error:
            log.error("delivery %s failed in the sender", d.id, exc_info=error)
        finally:
            self._flying.discard(d.id)
            self._wake.set()

    async def _send(self, d: Delivery) -> Delivery:
        """One attempt; the delivery as it stands after it."""
        now = datetime.now(UTC)
        tried = replace(d, attempts=d.attempts + 1, last_attempt_at=now)
        try:  # the host as aiohttp reads it: '１２７.０.０.１' is the address 127.0.0.1
            host = URL(d.webhook_url).host or ""
        except ValueError as error:
            return self._dropped(tried, f"refused: not a URL: {error}")
        refusal = literal_refusal(host, allow_private=self._config.allow_private)
        if refusal is not None:
            return self._dropped(tried, f"refused: {refusal}")
        assert self._session is not None
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "shardcron-notify",
            DELIVERY_HEADER: d.id,
            TIMESTAMP_HEADER: str(stamp),
        }
        secret = self._secrets(d.owner)
        if secret is not None:
            headers[SIGNATURE_HEADER] = signature(secret, stamp, d.body)
        try:
            async with self._session.post(
                d.webhook_url, data=d.body, headers=headers, allow_redirects=False
            ) as reply:
                await reply.content.read(1024)
                status = reply.status
        except RefusedAddress as error:
            return self._dropped(tried, f"refused: {error}")
        except aiohttp.ClientConnectorError as error:
            if isinstance(error.os_error, RefusedAddress):
                return self._dropped(tried, f"refused: {error.os_error}")
            return self._failed(tried, f"{type(error).__name__}: {error}", now)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            return self._failed(tried, f"{type(error).__name__}: {error}".strip(), now)
        if 200 <= status < 300:
            self._metrics.notify_deliveries.labels(outcome="sent").inc()
            return replace(
                tried,
                status=DeliveryStatus.DELIVERED,
                delivered_at=datetime.now(UTC),
                next_attempt_at=None,
                last_error="",
            )
        return self._failed(tried, f"HTTP {status}", now)

    def _failed(self, d: Delivery, error: str, now: datetime) -> Delivery:
        self._metrics.notify_deliveries.labels(outcome="failed").inc()
        at = retry_at(d, now, self._config)
        if at is None:
            return self._dropped(d, f"gave up after {d.attempts} attempts: {error}")
        return replace(d, next_attempt_at=at, last_error=error[:500])

    def _dropped(self, d: Delivery, error: str) -> Delivery:
        self._metrics.notify_deliveries.labels(outcome="dropped").inc()
        log.warning("delivery %s dropped: %s", d.id, error)
        return replace(
            d, status=DeliveryStatus.DROPPED, next_attempt_at=None, last_error=error[:500]
        )

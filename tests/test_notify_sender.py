"""The sender (``coordinator/notify/sender.py``) on a real SQLite store and a real HTTP
receiver: a delivery committed is sent signed and recorded DELIVERED; one whose name
resolves, at send time, to an address the node will not call (DNS rebinding) is never
connected to and is DROPPED, counted; a PENDING one the store holds (left by a node that
died) is read and sent."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from shardcron.client.types import Delivery, DeliveryStatus, Job, NotifyPolicy, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.notify.rules import decide
from shardcron.coordinator.notify.sender import NotifyConfig, Sender
from shardcron.coordinator.notify.signing import verify
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.store_builders import T0, create, make_job, make_run
from tests.support.waiting import until
from tests.support.webhooks import Receiver


class _Names(AbstractResolver):
    """Every name resolves to ``address`` (what a rebinding name would do)."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {"hostname": host, "host": self.address, "port": port, "family": socket.AF_INET,
             "proto": 0, "flags": 0}
        ]  # fmt: skip

    async def close(self) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


async def _committed(store: SqliteStore, url: str) -> tuple[Job, Delivery]:
    policy = NotifyPolicy(webhook_url=url, on_failure=True)
    job = make_job(spec=make_job().spec.replace(notify=policy))
    job = await create(store, job)
    run = make_run(job, state=RunState.FAILED, ended_at=T0)
    [d] = decide(job, run, T0)
    await store.commit(runs=[run], deliveries=[d])
    return job, d


def _sender(store: SqliteStore, metrics: Metrics, *, allow_private: bool) -> Sender:
    config = NotifyConfig(allow_private=allow_private, secrets={"alice": b"k" * 16})
    return Sender(store, owns=lambda shard: True, config=config, metrics=metrics,
                  resolver=_Names("127.0.0.1"))  # fmt: skip


async def test_a_pending_delivery_is_read_sent_signed_and_recorded(
    sqlite_store: SqliteStore, receiver: Receiver
) -> None:
    port = urlsplit(receiver.url).port
    job, d = await _committed(sqlite_store, f"http://hooks.example:{port}/x")
    metrics = Metrics()
    sender = _sender(sqlite_store, metrics, allow_private=True)
    sender.start()  # nothing handed over: it reads the store's pending ones
    try:
        await until(lambda: receiver.received, timeout=10)
        [got] = receiver.received
        assert got.body == d.body and got.headers["x-shardcron-delivery"] == d.id
        h = got.headers
        assert verify(b"k" * 16, h["x-shardcron-timestamp"], got.body, h["x-shardcron-signature"])

        async def delivered() -> bool:
            [now] = (await sqlite_store.list_deliveries(job.owner)).items
            return now.status == DeliveryStatus.DELIVERED and now.attempts == 1

        await until(delivered, timeout=10)
        assert await sqlite_store.pending_deliveries(d.shard) == []
    finally:
        await sender.stop()


async def test_a_name_that_resolves_inside_at_send_time_is_never_called(
    sqlite_store: SqliteStore, receiver: Receiver
) -> None:
    port = urlsplit(receiver.url).port
    job, d = await _committed(sqlite_store, f"http://hooks.example:{port}/x")
    metrics = Metrics()
    sender = _sender(sqlite_store, metrics, allow_private=False)
    sender.start()
    try:

        async def dropped() -> bool:
            [now] = (await sqlite_store.list_deliveries(job.owner)).items
            return now.status == DeliveryStatus.DROPPED

        await until(dropped, timeout=10)
        [now] = (await sqlite_store.list_deliveries(job.owner)).items
        assert "refused" in now.last_error and "127.0.0.1" in now.last_error
        await asyncio.sleep(0.2)
        assert receiver.received == []
        counted = metrics.notify_deliveries.labels(outcome="dropped")._value.get()
        assert counted == 1
    finally:
        await sender.stop()

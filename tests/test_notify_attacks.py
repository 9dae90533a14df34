"""Webhooks turned against the node: a public hook that redirects inside, an answer
that never ends, addresses that carry a private IPv4 address inside an IPv6 one, and
URLs with characters that are dropped before they are read. The sender runs on a real
SQLite store against real HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import Delivery, DeliveryStatus, NotifyPolicy, RunState
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.notify.addresses import (
    GuardedResolver,
    RefusedAddress,
    check_webhook,
    public,
)
from shardcron.coordinator.notify.rules import decide
from shardcron.coordinator.notify.sender import NotifyConfig, Sender
from shardcron.coordinator.sqlite.store import SqliteStore
from tests.support.store_builders import T0, create, make_job, make_run
from tests.support.waiting import until


@contextlib.asynccontextmanager
async def _serve(app: web.Application) -> AsyncIterator[int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def _delivery(store: SqliteStore, url: str) -> Delivery:
    job = await create(store, make_job(spec=make_job().spec.replace(
        notify=NotifyPolicy(webhook_url=url, on_failure=True))))  # fmt: skip
    [d] = decide(job, make_run(job, state=RunState.FAILED, ended_at=T0), T0)
    await store.commit(runs=[make_run(job, state=RunState.FAILED, ended_at=T0)], deliveries=[d])
    return d


async def _after_first_attempt(store: SqliteStore, d: Delivery) -> Delivery:
    sender = Sender(store, owns=lambda shard: True, metrics=Metrics(),
                    config=NotifyConfig(allow_private=True))  # fmt: skip
    sender.start()
    try:

        async def tried() -> Delivery | None:
            [now] = (await store.list_deliveries(d.owner)).items
            return now if now.attempts >= 1 else None

        return await until(tried, timeout=15)
    finally:
        await sender.stop()


async def test_a_redirect_is_never_followed(sqlite_store: SqliteStore) -> None:
    inside: list[str] = []

    async def metadata(request: web.Request) -> web.Response:
        inside.append(request.path)
        return web.Response(text="secret")

    app = web.Application()
    app.router.add_route("*", "/latest/meta-data", metadata)
    async with _serve(app) as port:

        async def hook(request: web.Request) -> web.Response:
            raise web.HTTPFound(f"http://127.0.0.1:{port}/latest/meta-data")

        app_hook = web.Application()
        app_hook.router.add_post("/hook", hook)
        async with _serve(app_hook) as hook_port:
            d = await _delivery(sqlite_store, f"http://127.0.0.1:{hook_port}/hook")
            after = await _after_first_attempt(sqlite_store, d)
            assert after.status == DeliveryStatus.PENDING and after.last_error == "HTTP 302"
            await asyncio.sleep(0.2)
            assert inside == []


async def test_an_answer_that_never_ends_is_read_only_in_part(sqlite_store: SqliteStore) -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(status=200)
        await reply.prepare(request)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            while True:
                await reply.write(b"x" * 65536)
        return reply

    app = web.Application()
    app.router.add_post("/hook", endless)
    async with _serve(app) as port:
        d = await _delivery(sqlite_store, f"http://127.0.0.1:{port}/hook")
        after = await _after_first_attempt(sqlite_store, d)
        assert after.status == DeliveryStatus.DELIVERED


@pytest.mark.parametrize(
    "address",
    [
        "::127.0.0.1",  # IPv4-compatible (deprecated ::/96)
        "::ffff:0:7f00:1",  # IPv4-translated
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "64:ff9b:1::a00:1",  # local-use NAT64
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2002:c0a8:1::1",  # 6to4 of 192.168.0.1
    ],
)
async def test_an_ipv6_address_carrying_a_private_ipv4_one_is_not_public(address: str) -> None:
    assert not public(address)
    with pytest.raises(InvalidArgument) as refused:
        await check_webhook(f"http://[{address}]/x", "spec.notify.webhook_url", allow_private=False)
    assert "not a public address" in refused.value.reason

    class _To(AbstractResolver):
        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            return [{"hostname": host, "host": address, "port": port,
                     "family": socket.AF_INET6, "proto": 0, "flags": 0}]  # fmt: skip

        async def close(self) -> None:
            pass

    with pytest.raises(RefusedAddress):
        await GuardedResolver(allow_private=False, inner=_To()).resolve("hooks.example", 80)


def test_ipv6_addresses_carrying_a_public_ipv4_one_stay_public() -> None:
    assert public("64:ff9b::808:808") and public("2002:808:808::1")


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example/\r\nX-Injected: 1",
        "http://hooks.exa\tmple/x",
        "http://hooks.example/a b",
        "http://hooks.example/\x00",
    ],
)
async def test_a_url_with_spaces_or_control_characters_is_refused(url: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await check_webhook(url, "spec.notify.webhook_url", allow_private=True)
    assert refused.value.field == "spec.notify.webhook_url"
    assert "control character or space" in refused.value.reason


async def test_a_name_with_one_private_address_among_public_ones_connects_only_to_those() -> None:
    class _Mixed(AbstractResolver):
        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            return [{"hostname": host, "host": a, "port": port, "family": socket.AF_INET,
                     "proto": 0, "flags": 0} for a in ("127.0.0.1", "8.8.8.8", "169.254.169.254")]  # fmt: skip

        async def close(self) -> None:
            pass

    found = await GuardedResolver(allow_private=False, inner=_Mixed()).resolve("hooks.example", 80)
    assert [r["host"] for r in found] == ["8.8.8.8"]


async def test_an_address_in_unicode_digits_stored_earlier_is_refused_at_send(
    sqlite_store: SqliteStore,
) -> None:
    """A URL stored while the node allowed private webhooks (or by a node that did):
    aiohttp reads '１２７.０.０.１' as the address 127.0.0.1 and never asks the resolver,
    so the sender judges the host as aiohttp will read it."""
    called: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        called.append(request.path)
        return web.Response()

    app = web.Application()
    app.router.add_post("/x", hook)
    async with _serve(app) as port:
        d = await _delivery(
            sqlite_store, f"http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{port}/x"
        )
        sender = Sender(sqlite_store, owns=lambda shard: True, metrics=Metrics(),
                        config=NotifyConfig(allow_private=False))  # fmt: skip
        sender.start()
        try:

            async def dropped() -> Delivery | None:
                [now] = (await sqlite_store.list_deliveries(d.owner)).items
                return now if now.status == DeliveryStatus.DROPPED else None

            after = await until(dropped, timeout=15)
        finally:
            await sender.stop()
        assert "127.0.0.1 is not a public address" in after.last_error
        assert called == []

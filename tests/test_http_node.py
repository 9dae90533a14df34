"""A node serves the HTTP/JSON API only when asked (``NodeConfig.http_listen``) and only
with the api role, on port 0 in tests, and stops serving it when it stops."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import aiohttp
import pytest

from shardcron.coordinator.node import Node
from tests.support.local_node import sqlite_node


def with_http(node: Node, listen: str, roles: frozenset[str] | None = None) -> Node:
    config = dataclasses.replace(node.config, http_listen=listen)
    if roles is not None:
        config = dataclasses.replace(config, roles=roles)
    return Node(node.raw_store, node.coordination, config)


async def test_http_is_served_on_its_own_port_and_stops_with_the_node(tmp_path: Path) -> None:
    node = with_http(sqlite_node(tmp_path, "n1"), "127.0.0.1:0")
    await node.start()
    try:
        assert node.http_port not in (0, node.port)
        url = f"http://127.0.0.1:{node.http_port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/v1/jobs", headers={"x-shardcron-owner": "o"}) as r:
                assert r.status == 200 and await r.json() == {}
            async with session.get(f"{url}/v1/cluster") as r:
                assert (await r.json())["leader"] == "n1"
    finally:
        await node.stop()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", node.http_port)


async def test_no_http_without_the_option_or_without_the_api_role(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    plain = sqlite_node(tmp_path / "a", "n1")
    await plain.start()
    await plain.stop()
    assert plain.http is None and plain.http_port == 0
    no_api = with_http(sqlite_node(tmp_path / "b", "n2"), "127.0.0.1:0", frozenset({"poller"}))
    await no_api.start()
    await no_api.stop()
    assert no_api.http is None

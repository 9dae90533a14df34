"""The view and the live pollers are served from the last read until ZooKeeper says
they changed (``coordinator/zk/views.py``): on a real ZooKeeper, a second node joining
or leaving, a shard moving, and a cut connection are each seen; in between nothing is
read again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shardcron.client.errors import Unavailable
from shardcron.coordinator.zk import coordination as zk_coordination
from shardcron.coordinator.zk.views import WatchedReads
from tests.support.waiting import until
from tests.support.zk_cluster import ZkCluster


class Counting:
    """Counts the reads made through a layout function, which still reads ZooKeeper."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.calls = 0
        real = getattr(zk_coordination, name)

        def counted(*args: Any) -> Any:
            self.calls += 1
            return real(*args)

        monkeypatch.setattr(zk_coordination, name, counted)


async def test_the_view_is_read_once_until_a_poller_joins_and_takes_shards(
    zk_cluster: ZkCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = Counting(monkeypatch, "read_view")
    a = await zk_cluster.add("a")
    await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"a"}))
    first = await a.view()
    assert first.shard_owners == zk_cluster.owners_in_zk()
    for _ in range(20):
        assert await a.view() is first
    assert reads.calls == 1

    await zk_cluster.add("b")
    await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"a", "b"}))

    async def current() -> bool:
        view = await a.view()
        return view.shard_owners == zk_cluster.owners_in_zk() and view.members == ["a", "b"]

    await until(current, 10.0, what="current", interval=0.05)
    assert set((await a.view()).shard_owners.values()) == {"a", "b"}
    settled = reads.calls
    assert settled > 1
    for _ in range(20):
        await a.view()
    assert reads.calls == settled


async def test_pollers_are_read_once_until_one_leaves(
    zk_cluster: ZkCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = Counting(monkeypatch, "_read_pollers")
    a = await zk_cluster.add("a")
    b = await zk_cluster.add("b")
    await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"a", "b"}))
    assert [m.id for m in await a.pollers()] == ["a", "b"]
    for _ in range(20):
        await a.pollers()
    assert reads.calls == 1

    await b.stop()

    async def left() -> bool:
        return [m.id for m in await a.pollers()] == ["a"]

    await until(left, 10.0, what="left", interval=0.05)
    assert (await a.pollers())[0].address.startswith("127.0.0.1:")


async def test_a_cut_connection_is_unavailable_not_an_old_view(zk_cluster: ZkCluster) -> None:
    a = await zk_cluster.add("a", partitionable=True, session_timeout=6.0)
    await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"a"}))
    await a.view()
    await a.pollers()
    zk_cluster.proxies["a"].freeze()

    async def refused() -> bool:
        try:
            await a.view()
        except Unavailable:
            return True
        return False

    await until(refused, 10.0, what="refused", interval=0.05)
    with pytest.raises(Unavailable):
        await a.pollers()
    zk_cluster.proxies["a"].thaw()

    async def back() -> bool:
        try:
            return (await a.view()).shard_owners == zk_cluster.owners_in_zk()
        except Unavailable:
            return False

    await until(back, 10.0, what="back", interval=0.05)


def test_a_read_overtaken_by_a_change_is_not_held() -> None:
    reads = WatchedReads()

    def read(watch: Callable[..., None]) -> str:
        watch("a node changed while it was read")
        return "old"

    assert reads.read("view", read) == "old"
    assert reads.held("view") is None
    assert reads.read("view", lambda _: "new") == "new"
    assert reads.held("view") == "new"
    reads.changed("SUSPENDED")
    assert reads.held("view") is None


def test_a_value_is_held_no_longer_than_its_age() -> None:
    now = [100.0]
    reads = WatchedReads(max_age=30.0, clock=lambda: now[0])
    reads.read("pollers", lambda _: ["a"])
    now[0] += 29.0
    assert reads.held("pollers") == ["a"]
    now[0] += 2.0
    assert reads.held("pollers") is None

"""Several ZooKeeper coordinations of one cluster in one test: ``ZkCluster`` starts them
on a real ZooKeeper (a node may sit behind a ``ZkProxy`` so a test can cut it off),
and ``AssignmentLog`` records every assignment each node's listener got, in order, and
whether two nodes ever held or served a shard at once."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable

from kazoo.client import KazooClient

from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.zk import ROLES, ZkCoordination
from tests.support.waiting import until
from tests.support.zookeeper import ZkProxy

SHARDS = 64
SESSION_TIMEOUT = 4.0
ROOT = "/shardcron/default"


class AssignmentLog:
    """Every Assignment every poller's listener got, in the order they ran."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, Assignment]] = []
        self.held: dict[str, frozenset[int]] = {}
        self.active: dict[str, frozenset[int]] = {}
        self.held_twice: list[tuple[str, str, list[int]]] = []
        self.active_twice: list[tuple[str, str, list[int]]] = []

    def listener(self, node: str) -> Callable[[Assignment], None]:
        def on_assignment(a: Assignment) -> None:
            self.events.append((time.monotonic(), node, a))
            self.held[node] = a.shards
            self.active[node] = a.shards if a.active else frozenset()
            for other in self.held:
                if other == node:
                    continue
                if both := self.held[other] & self.held[node]:
                    self.held_twice.append((node, other, sorted(both)))
                if both := self.active[other] & self.active[node]:
                    self.active_twice.append((node, other, sorted(both)))

        return on_assignment

    def served(self) -> dict[int, str]:
        return {s: node for node, shards in self.active.items() for s in shards}

    def last(self, node: str) -> Assignment | None:
        mine = [a for _, n, a in self.events if n == node]
        return mine[-1] if mine else None

    def of(self, node: str) -> list[Assignment]:
        return [a for _, n, a in self.events if n == node]

    async def wait(self, predicate: Callable[[], bool], timeout: float = 15.0) -> float:
        """Waits for ``predicate`` (``until``); returns when it became true (monotonic)."""
        await until(predicate, timeout, what="the assignments awaited", interval=0.005)
        return time.monotonic()


class ZkCluster:
    def __init__(self, hosts: str, admin: KazooClient) -> None:
        self.hosts = hosts
        self.admin = admin
        self.nodes: dict[str, ZkCoordination] = {}
        self.proxies: dict[str, ZkProxy] = {}
        self.timeline = AssignmentLog()

    async def add(
        self,
        node_id: str,
        *,
        roles: frozenset[str] = ROLES,
        partitionable: bool = False,
        session_timeout: float = SESSION_TIMEOUT,
        shard_count: int = SHARDS,
    ) -> ZkCoordination:
        hosts = self.hosts
        if partitionable:
            self.proxies[node_id] = proxy = ZkProxy(self.hosts)
            hosts = proxy.hosts
        c = ZkCoordination(
            hosts,
            node_id=node_id,
            shard_count=shard_count,
            session_timeout=session_timeout,
            roles=roles,
        )
        c.subscribe(self.timeline.listener(node_id))
        self.nodes[node_id] = c
        await c.start(
            poller_id=node_id if "poller" in roles else None,
            poller_address=f"127.0.0.1:{7400 + len(self.nodes)}",
        )
        return c

    async def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.thaw()
        for c in reversed(list(self.nodes.values())):
            await c.stop()
        for proxy in self.proxies.values():
            proxy.close()

    # What ZooKeeper holds, read by a client of its own.

    def owners_in_zk(self) -> dict[int, str]:
        owners = {}
        for child in self.admin.get_children(f"{ROOT}/owners"):
            try:
                data, _ = self.admin.get(f"{ROOT}/owners/{child}")
            except Exception:
                continue
            owners[int(child)] = json.loads(data)["poller"]
        return owners

    def assignment_in_zk(self) -> tuple[int, dict[int, str]]:
        data, _ = self.admin.get(f"{ROOT}/assignment")
        value = json.loads(data)
        return value["epoch"], {int(s): p for s, p in value["owners"].items()}

    def settled(self, pollers: set[str]) -> bool:
        """Every shard served once, balanced over ``pollers``, and ZooKeeper agrees."""
        served = self.timeline.served()
        if len(served) != SHARDS or set(served.values()) != pollers:
            return False
        counts = Counter(served.values())
        if max(counts.values()) - min(counts.values()) > 1:
            return False
        return self.owners_in_zk() == served and self.assignment_in_zk()[1] == served

"""Parts of the ZooKeeper coordination on their own, without a server: the
assignment feed's reaction to connection states, and membership across lost
sessions (with a stand-in for the session's node operations)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss

from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.zk.delivery import AssignmentFeed, PollersFeed
from shardcron.coordinator.zk.layout import Watch, cluster_paths
from shardcron.coordinator.zk.membership import Membership
from shardcron.coordinator.zk.session import Session, SessionChanged

PATHS = cluster_paths("default")
SERVING = Assignment(epoch=3, fencing_epoch=7, shards=frozenset({1, 2}))


class Feed:
    """An AssignmentFeed on an unopened Session, with what its listener got."""

    def __init__(self) -> None:
        self.session = Session("127.0.0.1:1", node_id="n", timeout=1.0, probe_path=PATHS.root)
        self.feed = AssignmentFeed(self.session)
        self.feed.attach(asyncio.get_running_loop())
        self.got: list[Assignment] = []
        self.feed.subscribe(self.got.append)
        self.session.handle_state(KazooState.CONNECTED)

    async def settle(self) -> list[Assignment]:
        await asyncio.sleep(0.01)
        return self.got


async def test_suspended_repeats_the_assignment_inactive_and_lost_empties_it() -> None:
    f = Feed()
    f.feed.set_fencing_epoch(7, 0)
    f.feed.set_epoch(3)
    f.feed.deliver(SERVING, 0)
    f.session.handle_state(KazooState.SUSPENDED)
    f.session.handle_state(KazooState.LOST)
    assert await f.settle() == [
        SERVING,
        Assignment(epoch=3, fencing_epoch=7, shards=SERVING.shards, active=False),
        Assignment(epoch=3, fencing_epoch=7, shards=frozenset(), active=False),
    ]


async def test_an_assignment_of_a_lost_session_is_never_delivered() -> None:
    f = Feed()
    f.session.handle_state(KazooState.LOST)
    with pytest.raises(SessionChanged):
        f.feed.deliver(SERVING, 0)
    with pytest.raises(SessionChanged):
        f.feed.set_fencing_epoch(8, 0)
    assert await f.settle() == []


async def test_nothing_is_delivered_active_while_disconnected() -> None:
    f = Feed()
    f.session.handle_state(KazooState.SUSPENDED)
    f.feed.deliver(SERVING, 0)
    f.session.handle_state(KazooState.CONNECTED)
    f.feed.deliver(SERVING, 0)
    f.feed.deliver(SERVING, 0)  # the same again: not delivered twice
    inactive = Assignment(epoch=3, fencing_epoch=7, shards=SERVING.shards, active=False)
    assert await f.settle() == [inactive, SERVING]


async def test_done_waits_for_what_a_listener_returned_and_close_is_the_last_word() -> None:
    f = Feed()
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    f.feed.subscribe(lambda _: gate)
    done = f.feed.deliver(SERVING, 0)
    await f.settle()
    assert f.got == [SERVING] and not done.is_set()
    gate.set_result(None)
    assert await asyncio.to_thread(done.wait, 5.0)
    f.feed.close()
    with pytest.raises(SessionChanged):
        f.feed.deliver(SERVING, 0)
    f.session.handle_state(KazooState.SUSPENDED)
    assert await f.settle() == [
        SERVING,
        Assignment(epoch=0, fencing_epoch=0, shards=frozenset(), active=False),
    ]


class FakeNodes:
    """Stands in for the Session's node operations: ephemeral nodes that go when
    the session is lost (``lose``), and failures to play."""

    def __init__(self) -> None:
        self.generation = 0
        self.nodes: dict[str, bytes] = {}
        self.failures: list[Exception] = []
        self.after_create: Callable[[], None] = lambda: None
        self._fencing = 0

    def lose(self) -> None:
        self.generation += 1
        self.nodes.clear()

    def bump(self, path: str, key: str) -> tuple[int, int]:
        self._fencing += 1
        return self._fencing, self._fencing

    def create_ephemeral(self, path: str, data: bytes, watch: Watch) -> bool:
        if self.failures:
            raise self.failures.pop(0)
        self.nodes[path] = data
        self.after_create()
        return True


def membership(nodes: FakeNodes, poller_id: str | None = "p1") -> Membership:
    return Membership(
        nodes,  # type: ignore[arg-type]
        PATHS,
        poller_id=poller_id,
        poller_address="10.0.0.1:7400",
        pollers_feed=PollersFeed(threading.Event()),
        watch=lambda _: None,
    )


def test_a_poller_whose_member_node_failed_at_rejoin_announces_it_again() -> None:
    nodes = FakeNodes()
    m = membership(nodes)
    m.next_fencing_epoch()
    assert m.announce_poller()
    nodes.lose()
    m.next_fencing_epoch()
    nodes.failures.append(ConnectionLoss())
    with pytest.raises(ConnectionLoss):
        m.announce_poller()
    assert m.poller_node_held()  # made again, not taken for the lost session's node
    assert nodes.nodes == {PATHS.poller("p1"): b'{"address":"10.0.0.1:7400"}'}


def test_a_worker_announced_as_its_session_is_lost_is_announced_again() -> None:
    nodes = FakeNodes()
    m = membership(nodes, poller_id=None)
    m.add_worker("w1", "10.0.0.2:0", {"slots": 2})
    nodes.after_create = nodes.lose  # the session goes right after the node was made
    m.announce_workers()
    assert nodes.nodes == {}
    nodes.after_create = lambda: None
    m.announce_workers()
    assert nodes.nodes == {PATHS.worker("w1"): b'{"address":"10.0.0.2:0","slots":2}'}
    m.announce_workers()  # announced in this session: nothing to do
    assert len(nodes.nodes) == 1

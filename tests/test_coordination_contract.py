"""The Coordination contract: what every implementation does, local or ZooKeeper.

Written once, run unchanged against ``LocalCoordination`` and ``ZkCoordination``
on a real server: every test takes ``coordination_factory``, parametrized over
both, so a test written here runs on each. Nothing in a test may know which one
it talks to. ``coordination_factory.new(node_id)`` returns a NEW, unstarted
Coordination of one cluster (the same data dir, or the same ZooKeeper chroot,
every call) with ``SHARDS`` shards, so a test can stop one and start another as a
restart; the fixture stops what it made. What only a cluster does (balance,
hand-over, failover, expired sessions) is in tests/test_coordination.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol

import pytest

from shardcron.coordinator.coordination import Assignment, Coordination, LocalCoordination, Member
from shardcron.coordinator.zk import ZkCoordination
from tests.support.waiting import until

SHARDS = 8
ALL = frozenset(range(SHARDS))
WAIT = 10.0  # seconds: generous, the suite runs on busy machines

SESSION_TIMEOUT = 4.0  # seconds, for ZkCoordination


class CoordinationFactory(Protocol):
    def new(self, node_id: str) -> Coordination: ...


class LocalFactory:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.made: list[Coordination] = []

    def new(self, node_id: str) -> Coordination:
        c = LocalCoordination(self.data_dir, shard_count=SHARDS, node_id=node_id)
        self.made.append(c)
        return c


class ZkFactory:
    def __init__(self, hosts: str) -> None:
        self.hosts = hosts
        self.made: list[Coordination] = []

    def new(self, node_id: str) -> Coordination:
        c = ZkCoordination(
            self.hosts,
            node_id=node_id,
            shard_count=SHARDS,
            session_timeout=SESSION_TIMEOUT,
        )
        self.made.append(c)
        return c


@pytest.fixture(params=["local", "zookeeper"])
def coordination_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> LocalFactory | ZkFactory:
    if request.param == "local":
        return LocalFactory(tmp_path)
    return ZkFactory(request.getfixturevalue("zk_hosts"))


@pytest.fixture
async def coordination_factory(
    coordination_backend: LocalFactory | ZkFactory,
) -> AsyncIterator[LocalFactory | ZkFactory]:
    yield coordination_backend
    for c in reversed(coordination_backend.made):
        await c.stop()


class Recorder:
    """An Assignment listener that keeps everything it was given, and where."""

    def __init__(self) -> None:
        self.assignments: list[Assignment] = []
        self.threads: set[int] = set()

    def __call__(self, assignment: Assignment) -> None:
        self.assignments.append(assignment)
        self.threads.add(threading.get_ident())

    @property
    def last(self) -> Assignment | None:
        return self.assignments[-1] if self.assignments else None

    async def wait_for(
        self, predicate: Callable[[Assignment], bool], timeout: float = WAIT
    ) -> Assignment:
        def matching() -> Assignment | None:
            last = self.last
            return last if last is not None and predicate(last) else None

        return await until(matching, timeout, what="such an assignment")


def serving_all(a: Assignment) -> bool:
    return a.active and a.shards == ALL


async def start_poller(
    factory: CoordinationFactory, node_id: str, address: str = "127.0.0.1:7401"
) -> tuple[Coordination, Recorder]:
    coordination = factory.new(node_id)
    recorder = Recorder()
    coordination.subscribe(recorder)
    await coordination.start(poller_id=node_id, poller_address=address)
    return coordination, recorder


async def test_a_single_poller_gets_every_shard_active_under_an_epoch(
    coordination_factory: CoordinationFactory,
) -> None:
    _, recorder = await start_poller(coordination_factory, "p1")
    a = await recorder.wait_for(serving_all)
    assert a.epoch >= 1
    assert a.fencing_epoch >= 1


async def test_listeners_run_on_the_event_loop(
    coordination_factory: CoordinationFactory,
) -> None:
    _, recorder = await start_poller(coordination_factory, "p1")
    await recorder.wait_for(serving_all)
    assert recorder.threads == {threading.get_ident()}


async def test_fencing_epochs_strictly_increase_across_restarts(
    coordination_factory: CoordinationFactory,
) -> None:
    seen = []
    for _ in range(3):
        coordination, recorder = await start_poller(coordination_factory, "p1")
        seen.append((await recorder.wait_for(serving_all)).fencing_epoch)
        await coordination.stop()
    assert seen == sorted(set(seen)), f"fencing epochs not strictly increasing: {seen}"


async def test_the_epoch_never_goes_back_across_restarts(
    coordination_factory: CoordinationFactory,
) -> None:
    seen = []
    for _ in range(2):
        coordination, recorder = await start_poller(coordination_factory, "p1")
        seen.append((await recorder.wait_for(serving_all)).epoch)
        assert (await coordination.view()).epoch == seen[-1]
        await coordination.stop()
    assert seen[1] >= seen[0] >= 1


async def test_view_names_leader_members_and_owners(
    coordination_factory: CoordinationFactory,
) -> None:
    coordination, recorder = await start_poller(coordination_factory, "p1")
    a = await recorder.wait_for(serving_all)
    view = await coordination.view()
    assert view.leader == "p1"
    assert view.epoch == a.epoch
    assert "p1" in view.members
    assert view.shard_owners == dict.fromkeys(range(SHARDS), "p1")
    assert view.mode


async def test_stop_empties_the_assignment_and_frees_the_shards_at_once(
    coordination_factory: CoordinationFactory,
) -> None:
    first, recorder = await start_poller(coordination_factory, "p1")
    await recorder.wait_for(serving_all)
    await first.stop()
    assert recorder.last is not None
    assert recorder.last.shards == frozenset()
    assert not recorder.last.active
    # Another poller takes every shard without waiting for a session to expire.
    started = time.monotonic()
    _, successor = await start_poller(coordination_factory, "p2")
    await successor.wait_for(serving_all, timeout=3.0)
    assert time.monotonic() - started < 3.0


async def test_workers_discover_the_poller(
    coordination_factory: CoordinationFactory,
) -> None:
    coordination, recorder = await start_poller(coordination_factory, "p1", "10.1.2.3:7400")
    await recorder.wait_for(serving_all)
    assert await coordination.pollers() == [Member(id="p1", address="10.1.2.3:7400")]
    seen: list[list[Member]] = []
    coordination.watch_pollers(seen.append)
    await until(lambda: seen, WAIT, "the pollers, watched")
    assert [[m.id for m in pollers] for pollers in seen] == [["p1"]]
    assert seen[0][0].address == "10.1.2.3:7400"


async def test_registered_workers_are_listed(
    coordination_factory: CoordinationFactory,
) -> None:
    coordination, recorder = await start_poller(coordination_factory, "p1")
    await recorder.wait_for(serving_all)
    await coordination.register_worker("w1", "10.0.0.9:0", {"slots": 4, "labels": {"gpu": "1"}})
    workers = await coordination.workers()
    assert workers == [
        Member(id="w1", address="10.0.0.9:0", info={"slots": 4, "labels": {"gpu": "1"}})
    ]


async def test_stop_is_idempotent_and_harmless_before_start(
    coordination_factory: CoordinationFactory,
) -> None:
    unstarted = coordination_factory.new("p0")
    await unstarted.stop()
    coordination, recorder = await start_poller(coordination_factory, "p1")
    await recorder.wait_for(serving_all)
    await coordination.stop()
    count = len(recorder.assignments)
    await coordination.stop()
    assert len(recorder.assignments) == count

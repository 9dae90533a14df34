"""Coordination: what only a cluster does (the contract every implementation keeps
is tests/test_coordination_contract.py): balance, hand-over, failover, expired and
suspended sessions, on a real ZooKeeper.

The cluster tests watch every poller's listener on one timeline (all listeners
run on the test's event loop, so its order is the order the pollers acted in)
and check that no shard is ever active on two pollers at once. Failover times
are printed (``pytest -s``) as ``failover: ...`` lines.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections import Counter

import pytest

from shardcron.client.errors import FailedPrecondition, Unavailable
from shardcron.coordinator.coordination import (
    Member,
)
from shardcron.coordinator.zk import ZkCoordination, balance_shards
from tests.support.waiting import until
from tests.support.zk_cluster import ROOT, SESSION_TIMEOUT, SHARDS, ZkCluster
from tests.support.zookeeper import expire_session

# --------------------------------------------------------------------------- balance


def moved(before: dict[int, str], after: dict[int, str]) -> int:
    return sum(1 for s, p in after.items() if before.get(s) != p)


def assert_balanced(owners: dict[int, str], pollers: set[str], shard_count: int) -> None:
    assert set(owners) == set(range(shard_count))
    counts = Counter(owners.values())
    assert set(counts) == pollers
    assert max(counts.values()) - min(counts.values()) <= 1, counts


def fewest_moves(current: dict[int, str], pollers: list[str], shard_count: int) -> int:
    """Brute force: the fewest shards any balanced assignment must move."""
    base, extra = divmod(shard_count, len(pollers))
    had = Counter(p for s, p in current.items() if p in pollers and 0 <= s < shard_count)
    best = 0
    for bigger in itertools.combinations(pollers, extra):
        kept = sum(min(had[p], base + (p in bigger)) for p in pollers)
        best = max(best, kept)
    return shard_count - best


def test_balance_from_nothing_is_even() -> None:
    for n in range(1, 9):
        pollers = {f"p{i}" for i in range(n)}
        assert_balanced(balance_shards({}, pollers, SHARDS), pollers, SHARDS)
    assert balance_shards({1: "gone"}, [], SHARDS) == {}


def test_balance_moves_only_what_a_joining_poller_must_get() -> None:
    two = balance_shards({}, ["a", "b"], SHARDS)
    three = balance_shards(two, ["a", "b", "c"], SHARDS)
    assert_balanced(three, {"a", "b", "c"}, SHARDS)
    assert moved(two, three) == SHARDS // 3
    assert all(three[s] == "c" for s in three if two[s] != three[s])


def test_balance_moves_only_the_shards_of_a_leaving_poller() -> None:
    three = balance_shards({}, ["a", "b", "c"], SHARDS)
    two = balance_shards(three, ["a", "c"], SHARDS)
    assert_balanced(two, {"a", "c"}, SHARDS)
    assert {s for s in two if two[s] != three[s]} == {s for s, p in three.items() if p == "b"}


def test_balance_is_stable_and_ignores_what_it_does_not_know() -> None:
    owners = balance_shards({}, ["a", "b", "c"], SHARDS)
    assert balance_shards(owners, ["c", "b", "a"], SHARDS) == owners
    polluted = {**owners, 999: "a", -1: "b"}
    assert balance_shards(polluted, ["a", "b", "c"], SHARDS) == owners


def test_balance_moves_the_fewest_shards_possible() -> None:
    rng = random.Random(7)
    for _ in range(300):
        shard_count = rng.randint(1, 40)
        known = [f"p{i}" for i in range(6)]
        current = {s: rng.choice(known) for s in range(shard_count) if rng.random() < 0.9}
        pollers = sorted(rng.sample(known, rng.randint(1, 5)))
        owners = balance_shards(current, pollers, shard_count)
        assert_balanced(
            owners,
            set(pollers) if shard_count >= len(pollers) else set(owners.values()),
            shard_count,
        )
        assert moved(current, owners) == fewest_moves(current, pollers, shard_count)


# --------------------------------------------------------------------------- a cluster


def report(what: str, seconds: float, session_timeout: float = SESSION_TIMEOUT) -> None:
    print(f"\nfailover: {what}: {seconds:.3f}s (session timeout {session_timeout}s)")


async def test_two_then_three_pollers_balance_and_a_joiner_moves_the_fewest_shards(
    zk_cluster: ZkCluster,
) -> None:
    await zk_cluster.add("a")
    await zk_cluster.add("b")
    await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"a", "b"}))
    before = zk_cluster.timeline.served()
    await zk_cluster.add("c")
    await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"a", "b", "c"}))
    after = zk_cluster.timeline.served()
    assert moved(before, after) == SHARDS // 3
    assert all(after[s] == "c" for s in after if before[s] != after[s])
    assert zk_cluster.timeline.held_twice == []
    view = await zk_cluster.nodes["c"].view()
    assert view.leader == "a"
    assert view.members == ["a", "b", "c"]
    assert view.shard_owners == after


async def test_a_stopping_poller_hands_its_shards_over(zk_cluster: ZkCluster) -> None:
    for node in "abc":
        await zk_cluster.add(node)
    await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"a", "b", "c"}))
    epoch = zk_cluster.assignment_in_zk()[0]

    started = time.monotonic()
    await zk_cluster.nodes["b"].stop()
    done = await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"a", "c"}))
    report("graceful stop of a follower poller -> all shards served", done - started)
    assert zk_cluster.assignment_in_zk()[0] == epoch  # the same leader did it

    started = time.monotonic()
    await zk_cluster.nodes["a"].stop()  # the leader
    done = await zk_cluster.timeline.wait(lambda: zk_cluster.settled({"c"}))
    report("graceful stop of the leader -> all shards served", done - started)
    assert zk_cluster.assignment_in_zk()[0] > epoch
    assert (await zk_cluster.nodes["c"].view()).leader == "c"
    assert zk_cluster.timeline.held_twice == []


async def test_a_lost_shard_is_released_only_after_the_listener_is_done(
    zk_cluster: ZkCluster,
) -> None:
    """A poller's listener may return an awaitable (the poller finishing the store
    write in flight): the shards it lost stay held until it is done."""
    a = await zk_cluster.add("a")
    timeline = zk_cluster.timeline
    await timeline.wait(lambda: zk_cluster.settled({"a"}))
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    a.subscribe(lambda assignment: gate if len(assignment.shards) < SHARDS else None)
    await zk_cluster.add("b")
    await timeline.wait(lambda: len(timeline.held["a"]) == SHARDS // 2)
    await asyncio.sleep(0.5)
    assert zk_cluster.owners_in_zk() == dict.fromkeys(range(SHARDS), "a")
    assert not timeline.held.get("b")
    gate.set_result(None)
    await timeline.wait(lambda: zk_cluster.settled({"a", "b"}))
    assert timeline.held_twice == []


async def test_a_partitioned_leader_is_replaced_and_its_shards_stay_served(
    zk_cluster: ZkCluster,
) -> None:
    """The leader (also a poller) stops hearing from ZooKeeper, as a hung or cut-off
    process would: it stops leasing before its session can expire; when the session
    expires a new leader takes over with a higher epoch and the shards move; when
    the old leader comes back it learns its session is gone, drops everything at
    once and rejoins with a higher fencing epoch."""
    nodes = {name: await zk_cluster.add(name, partitionable=True) for name in ("a", "b", "c")}
    timeline = zk_cluster.timeline
    await timeline.wait(lambda: zk_cluster.settled({"a", "b", "c"}))
    await timeline.wait(lambda: any(n.is_leader for n in nodes.values()))
    me = next(name for name, n in nodes.items() if n.is_leader)  # whoever won the election
    old = nodes[me]
    rest = {"a", "b", "c"} - {me}
    epoch = zk_cluster.assignment_in_zk()[0]
    fencing = timeline.last(me).fencing_epoch  # type: ignore[union-attr]

    partitioned = time.monotonic()
    zk_cluster.proxies[me].freeze()
    suspended = await timeline.wait(lambda: not timeline.last(me).active)  # type: ignore[union-attr]
    served = await timeline.wait(
        lambda: set(timeline.served().values()) == rest and len(timeline.served()) == SHARDS
    )
    report("leader partitioned away -> it stops leasing", suspended - partitioned)
    report("leader partitioned away -> every shard served again", served - partitioned)
    assert suspended - partitioned < SESSION_TIMEOUT
    assert served - partitioned < SESSION_TIMEOUT + 3.0
    view = await nodes[min(rest)].view()
    assert view.leader in rest
    assert view.epoch > epoch
    assert zk_cluster.assignment_in_zk()[0] == view.epoch

    healed = time.monotonic()
    zk_cluster.proxies[me].thaw()
    emptied = await timeline.wait(lambda: timeline.last(me).shards == frozenset())  # type: ignore[union-attr]
    report("partition healed -> old leader drops everything", emptied - healed)
    await timeline.wait(lambda: zk_cluster.settled({"a", "b", "c"}))
    assert timeline.last(me).fencing_epoch > fencing  # type: ignore[union-attr]
    assert (await old.view()).leader == view.leader
    assert timeline.active_twice == []


async def test_an_expired_session_drops_every_shard_at_once_and_rejoins_higher(
    zk_cluster: ZkCluster,
) -> None:
    leader = await zk_cluster.add("a")
    await zk_cluster.add("b")
    await zk_cluster.add("c")
    timeline = zk_cluster.timeline
    await timeline.wait(lambda: zk_cluster.settled({"a", "b", "c"}))
    epoch = zk_cluster.assignment_in_zk()[0]
    fencing = timeline.last("a").fencing_epoch  # type: ignore[union-attr]
    count = len(timeline.of("a"))

    expired = time.monotonic()
    expire_session(zk_cluster.hosts, leader.client)
    emptied = await timeline.wait(lambda: timeline.last("a").shards == frozenset(), timeout=2.0)  # type: ignore[union-attr]
    report("leader session expired -> it drops every shard", emptied - expired)
    await timeline.wait(lambda: len(timeline.served()) == SHARDS)
    report("leader session expired -> every shard served again", time.monotonic() - expired)
    await timeline.wait(lambda: zk_cluster.settled({"a", "b", "c"}))
    after = timeline.of("a")[count:]
    first_empty = next(i for i, a in enumerate(after) if not a.shards)
    assert all(not a.active for a in after[:first_empty])  # suspended, then lost
    rejoined = [a for a in after[first_empty:] if a.shards]
    assert rejoined and all(a.fencing_epoch > fencing for a in rejoined)
    assert zk_cluster.assignment_in_zk()[0] > epoch
    assert (await leader.view()).leader in ("b", "c")
    assert timeline.active_twice == []


async def test_a_suspended_connection_stops_leasing_before_the_session_can_expire(
    zk_cluster: ZkCluster,
) -> None:
    timeout = 6.0
    node = await zk_cluster.add("a", partitionable=True, session_timeout=timeout)
    timeline = zk_cluster.timeline
    await timeline.wait(lambda: zk_cluster.settled({"a"}))
    before = timeline.last("a")
    assert before is not None
    member = zk_cluster.admin.exists(f"{ROOT}/members/pollers/a")
    assert member is not None

    cut = time.monotonic()
    zk_cluster.proxies["a"].freeze()
    # ownership lapses after at most half a session plus one confirmation interval,
    # whatever the client library's own detection takes
    lapse = timeout / 2 + timeout / 6 + 0.5
    await until(lambda: not node.ownership_valid(), lapse, "ownership unconfirmed", 0.05)
    report("connection cut -> ownership unconfirmed", time.monotonic() - cut, timeout)
    suspended = await timeline.wait(lambda: not timeline.last("a").active, timeout=timeout)  # type: ignore[union-attr]
    report("connection cut -> poller stops leasing", suspended - cut, timeout)
    assert suspended - cut < timeout  # before the session can expire
    assert timeline.last("a").shards == before.shards  # type: ignore[union-attr]
    still = zk_cluster.admin.exists(f"{ROOT}/members/pollers/a")  # the session lives on
    assert still is not None and still.ephemeralOwner == member.ephemeralOwner

    zk_cluster.proxies["a"].thaw()
    await timeline.wait(lambda: timeline.last("a").active)  # type: ignore[union-attr]
    assert timeline.last("a") == before  # same shards, same epochs: nothing was lost
    assert all(a.shards for a in timeline.of("a"))  # never emptied
    assert node.client.client_id[0] == member.ephemeralOwner


async def test_a_deposed_leaders_assignment_write_fails(zk_cluster: ZkCluster) -> None:
    leader = await zk_cluster.add("a")
    timeline = zk_cluster.timeline
    await timeline.wait(lambda: zk_cluster.settled({"a"}))
    term = leader.term
    # A rival term starts behind the leader's back (as after a partition).
    data, stat = zk_cluster.admin.get(f"{ROOT}/epoch")
    zk_cluster.admin.set(
        f"{ROOT}/epoch", json.dumps({"epoch": term + 1}).encode(), version=stat.version
    )
    await zk_cluster.add("b", roles=frozenset({"poller"}))
    await timeline.wait(lambda: zk_cluster.settled({"a", "b"}))
    epoch, _ = zk_cluster.assignment_in_zk()
    assert epoch == term + 2  # the write under the old term failed; a new term did it
    assert leader.term == term + 2
    assert timeline.held_twice == []


async def test_nodes_configured_with_another_shard_count_are_refused(
    zk_cluster: ZkCluster,
) -> None:
    await zk_cluster.add("a")
    with pytest.raises(FailedPrecondition):
        await zk_cluster.add("b", shard_count=SHARDS // 2)


async def test_an_unreachable_zookeeper_is_unavailable() -> None:
    c = ZkCoordination("127.0.0.1:1", node_id="x", shard_count=8, session_timeout=1.0)
    with pytest.raises(Unavailable):
        await c.start(poller_id="x", poller_address="127.0.0.1:7400")
    await c.stop()
    with pytest.raises(Unavailable):
        await c.view()


async def test_workers_discover_pollers_and_their_changes(zk_cluster: ZkCluster) -> None:
    worker_node = await zk_cluster.add("w-host", roles=frozenset())
    await worker_node.register_worker("w1", "10.0.0.5:0", {"slots": 2})
    seen: list[list[Member]] = []
    worker_node.watch_pollers(seen.append)

    def ids() -> list[str]:
        return [m.id for m in seen[-1]] if seen else ["?"]

    await zk_cluster.timeline.wait(lambda: ids() == [])
    a = await zk_cluster.add("a")
    await zk_cluster.timeline.wait(lambda: ids() == ["a"])
    await zk_cluster.add("b")
    await zk_cluster.timeline.wait(lambda: ids() == ["a", "b"])
    assert seen[-1][0].address.startswith("127.0.0.1:")
    assert await zk_cluster.nodes["b"].workers() == [
        Member(id="w1", address="10.0.0.5:0", info={"slots": 2})
    ]
    await a.stop()
    await zk_cluster.timeline.wait(lambda: ids() == ["b"])
    await worker_node.stop()
    assert await zk_cluster.nodes["b"].workers() == []
    assert "w-host" not in (await zk_cluster.nodes["b"].view()).members

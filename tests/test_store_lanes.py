"""The poller's store calls have a concurrency limit of their own: a burst of api calls
that fills the other limit never holds a poller turn back (a turn once waited 31 s
behind creates). Against a real Cassandra, whose store bounds requests in flight."""

from __future__ import annotations

import asyncio

from shardcron.coordinator.cassandra.store import CassandraStore
from shardcron.coordinator.store_lanes import Lanes, Limit, mark_poller


async def test_the_poller_task_and_the_tasks_it_starts_draw_on_their_own_limit() -> None:
    lanes = Lanes(1)
    others = lanes.current()

    async def poller() -> tuple[Limit, Limit]:
        mark_poller()

        async def child() -> Limit:
            return lanes.current()

        return lanes.current(), await asyncio.create_task(child())

    mine, childs = await asyncio.create_task(poller())
    assert mine is childs and mine is not others
    assert lanes.current() is others  # marking a task leaves its creator alone


async def test_a_poller_read_goes_through_while_api_calls_fill_their_limit(
    cassandra_store: CassandraStore,
) -> None:
    others = cassandra_store._cql._lanes.current()  # type: ignore[union-attr]
    for _ in range(cassandra_store._cql.max_concurrency):
        await others.acquire()  # as many api requests in flight as allowed
    try:

        async def poller_read() -> object:
            mark_poller()
            return await cassandra_store.oldest_due(0)

        assert await asyncio.wait_for(asyncio.create_task(poller_read()), 60) is None
        assert others.locked()
    finally:
        for _ in range(cassandra_store._cql.max_concurrency):
            others.release()


async def test_a_limit_serves_waiters_in_order_and_passes_on_a_cancelled_waiters_slot() -> None:
    limit = Limit(2)
    await limit.acquire()
    await limit.acquire()
    assert limit.locked()
    served: list[int] = []

    async def waiter(i: int) -> None:
        async with limit:
            served.append(i)
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(waiter(i)) for i in range(4)]
    await asyncio.sleep(0)  # all four queued
    tasks[1].cancel()  # gives up its place in the queue
    limit.release()
    await asyncio.sleep(0)
    limit.release()  # hands the slot to waiter 2 ...
    tasks[2].cancel()  # ... cancelled before it runs: it passes the slot on to waiter 3
    await asyncio.gather(*tasks, return_exceptions=True)
    assert served == [0, 3]
    assert not limit.locked()
    for _ in range(2):  # both slots free again, none lost or made up
        await limit.acquire()
    assert limit.locked()

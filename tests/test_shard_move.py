"""Issue 11, item 4: a shard move re-runs finished work. Regression tests.

Two real pollers on one SQLite store, each behind its own gRPC lease stream, and a
real ``Worker`` connected to both. A run is leased by the first poller; its shard
then moves to the second (released by a live first poller, or taken over from a
dead one) while the run goes on. The lease's renewals and the run's result must
reach the new owner, which adopts the lease under the token the first one issued:
the run executes once, and ends SUCCEEDED as attempt 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import grpc
import pytest

from shardcron.client.types import HandlerTask, JobSpec, Run, RunState
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import Phase, PollerConfig
from shardcron.coordinator.poller.streams import WorkerStreams
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import worker_pb2_grpc
from shardcron.worker import HandlerRegistry, Worker
from shardcron.worker.context import HandlerContext
from tests.support.lease_streams import final_run
from tests.support.pollers import WAIT, PollerSetup, build_poller, invariants_held
from tests.support.store_builders import SHARDS, make_job, make_run
from tests.support.waiting import until

LEASE_TTL = timedelta(seconds=2)  # the run outlives it: only renewals keep it going
ALL = frozenset(range(SHARDS))


class Node:
    """A poller behind its own lease-stream server, on the shared store."""

    def __init__(self, store: SqliteStore, poller_id: str) -> None:
        config = PollerConfig(
            scan_interval=timedelta(milliseconds=100),
            lease_ttl=LEASE_TTL,
            heartbeat_interval=timedelta(milliseconds=200),
        )
        self.poller = build_poller(store, PollerSetup(config=config, poller_id=poller_id))
        self.server = grpc.aio.server()
        servicer = WorkerStreamServicer(self.poller.submit, self.poller.may_lease)
        worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"

    async def start(self, shards: frozenset[int], fencing_epoch: int) -> None:
        await self.server.start()
        self.poller.start()
        await self.assign(shards, fencing_epoch)

    async def assign(self, shards: frozenset[int], fencing_epoch: int) -> None:
        await self.poller.on_assignment(
            Assignment(epoch=fencing_epoch, fencing_epoch=fencing_epoch, shards=shards)
        )

    async def kill(self) -> None:
        """Gone at once: its streams end, nothing more is written or answered."""
        await self.server.stop(None)
        await self.poller.stop()
        invariants_held(self.poller)


class Executions:
    """A handler that records each execution and ends when told to."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, int]] = []  # (run id, attempt), one per execution
        self.release = asyncio.Event()

    async def __call__(self, ctx: HandlerContext) -> str:
        self.attempts.append((ctx.run_id, ctx.attempt))
        await self.release.wait()
        return "done"


@pytest.fixture
def store(sqlite_store: SqliteStore) -> SqliteStore:
    return sqlite_store


@contextlib.asynccontextmanager
async def worker_of(*nodes: Node, handler: Executions) -> AsyncIterator[Worker]:
    registry = HandlerRegistry()
    registry.register("record", handler)
    worker = Worker([n.address for n in nodes], worker_id="w1", slots=2, registry=registry)
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: sum(link.connected for link in worker.links) == len(nodes), WAIT)
        yield worker
    finally:
        handler.release.set()
        await worker.stop()
        await task


async def hinted_run(store: SqliteStore, node: Node) -> Run:
    """A one-off job, written and hinted to ``node``; its run."""
    now = utcnow()
    spec = JobSpec(name="moved", task=HandlerTask(name="record"))
    job = dataclasses.replace(make_job(spec=spec), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await store.create_jobs([NewJob(job=job, runs=[run])])
    node.poller.runs_created([run], [job])
    return run


async def leased_run(store: SqliteStore, node: Node) -> Run:
    """A one-off job, written and hinted to ``node``, and its run once it is leased."""
    run = await hinted_run(store, node)
    await until(lambda: node.poller.phase_of(run.id) == Phase.LEASED, WAIT, "leased")
    return run


async def stored(store: SqliteStore, run_id: str) -> Run:
    return (await store.get_runs([run_id]))[run_id]


async def _state_is(store: SqliteStore, run_id: str, state: RunState) -> bool:
    return (await stored(store, run_id)).state == state


async def ends_once(store: SqliteStore, run: Run, handler: Executions, new: Node) -> None:
    """The run, held by ``new`` now, is renewed there past its first lease, then ends
    SUCCEEDED as attempt 1 under the first owner's token, executed once."""
    first = await stored(store, run.id)
    assert first.lease_expires_at is not None
    await until(lambda: new.poller.phase_of(run.id) == Phase.LEASED, WAIT, "adopted")
    # past the deadline the first owner gave: only the new owner's renewals keep it
    past = first.lease_expires_at + LEASE_TTL
    await until(lambda: utcnow() >= past, WAIT, "a lease time past the first owner's deadline")
    assert handler.attempts == [(run.id, 1)], "the run was killed or executed again"
    handler.release.set()

    ended = await final_run(new.poller, run.id)
    assert (ended.state, ended.attempt, ended.lease_token) == (
        RunState.SUCCEEDED,
        1,
        first.lease_token,
    )
    assert handler.attempts == [(run.id, 1)]
    runs = await store.list_runs(run.owner, run.job_id)
    assert [r.id for r in runs.items] == [run.id], "a retry was written"


async def test_a_shard_released_by_a_live_poller_moves_without_a_second_execution(
    store: SqliteStore,
) -> None:
    """Found on a three-node cluster: when a node joined and took a shard, the result
    of a run leased just before the move was refused by the old owner ("stale
    fencing token") and the run executed a second time once its lease lapsed on the
    new owner. Now the old owner answers not_owner, the worker offers the lease and
    the result to its other pollers, and the new owner records them."""
    old, new = Node(store, "p-old"), Node(store, "p-new")
    await old.start(ALL, fencing_epoch=1)
    await new.start(frozenset(), fencing_epoch=2)
    handler = Executions()
    try:
        async with worker_of(old, new, handler=handler):
            run = await leased_run(store, old)
            await until(lambda: handler.attempts, WAIT, "the run started")
            await old.assign(frozenset(), fencing_epoch=1)  # released, as ZooKeeper asks
            await new.assign(ALL, fencing_epoch=2)
            await ends_once(store, run, handler, new)
    finally:
        await old.kill()
        await new.kill()


async def test_a_shard_of_a_dead_poller_moves_without_a_second_execution(
    store: SqliteStore,
) -> None:
    """Found on a three-node cluster: a command that exited 0 on a live worker just
    after its poller was SIGKILLed was recorded FAILED/WORKER_LOST and run again.
    Now the worker names the lease, and offers the result, to the poller that takes
    the dead one's shards."""
    old, new = Node(store, "p-old"), Node(store, "p-new")
    await old.start(ALL, fencing_epoch=1)
    await new.start(frozenset(), fencing_epoch=2)
    handler = Executions()
    try:
        async with worker_of(old, new, handler=handler) as worker:
            run = await leased_run(store, old)
            await until(lambda: handler.attempts, WAIT, "the run started")
            await old.kill()
            await until(lambda: not worker.links[0].connected, WAIT, "the stream lost")
            await new.assign(ALL, fencing_epoch=2)
            await ends_once(store, run, handler, new)
    finally:
        await new.kill()


@pytest.mark.parametrize("applying_fails", [False, True], ids=["applied", "applying_fails"])
async def test_a_shard_is_released_only_once_the_result_accepted_before_is_written(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, applying_fails: bool
) -> None:
    """A result and the assignment taking its shard away, handled in one turn: the
    release was confirmed at once, before that turn's commit, so the next owner
    could read the run still RUNNING, adopt it, and record it WORKER_LOST over the
    success once its worker, told the result was accepted, stopped naming it. The
    release now waits for that commit. So it does when applying the assignment
    fails (regression, issue 33: the poller reset and confirmed the release at once,
    and its turn went on to write the result after it)."""
    if applying_fails:

        def fails(self: WorkerStreams) -> None:
            raise RuntimeError("applying the assignment failed")

        monkeypatch.setattr(WorkerStreams, "drop_unsent_leases", fails)
    node = Node(store, "p1")
    await node.start(ALL, fencing_epoch=1)
    handler = Executions()
    real_commit = store.commit
    permits = asyncio.Semaphore(0)
    entered = 0
    gated = False

    async def commit(**kw: Any) -> None:
        nonlocal entered
        if gated:
            entered += 1
            await permits.acquire()
        await real_commit(**kw)

    monkeypatch.setattr(store, "commit", commit)
    try:
        async with worker_of(node, handler=handler):
            run = await leased_run(store, node)
            await until(lambda: handler.attempts, WAIT, "the run started")
            # its Started written first: the message queued below is its result
            await until(lambda: _state_is(store, run.id, RunState.RUNNING), WAIT, "started")
            gated = True
            await hinted_run(store, node)  # a turn that writes, held in its commit
            await until(lambda: entered == 1, WAIT, "a turn in its commit")
            handler.release.set()  # the result waits in the inbox meanwhile
            # the result is in the inbox, behind the turn held (the assignment after it)
            await until(lambda: node.poller._inbox, WAIT, "the result queued")
            applied = node.poller.on_assignment(
                Assignment(epoch=1, fencing_epoch=1, shards=frozenset())
            )
            permits.release()  # the next turn takes the result and the assignment
            await until(lambda: entered == 2, WAIT, "the next turn in its commit")
            assert not applied.done(), "the shard was released before its result was written"
            permits.release()
            await asyncio.wait_for(applied, WAIT)
            assert (await stored(store, run.id)).state == RunState.SUCCEEDED
    finally:
        gated = False
        for _ in range(8):
            permits.release()
        await node.kill()

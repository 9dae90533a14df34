"""A follow of a run's output over gRPC: it is bounded in time by the node
(``service.FOLLOW_MAX``) and the SDK follows again from where it was, so a client reads
the whole output through its ``eof`` however many times the node ended the stream; its
headers go out before any output exists; and a follow past the principal's limit is
refused RESOURCE_EXHAUSTED naming ``max_follows``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from shardcron.client.errors import ResourceExhausted
from shardcron.client.sdk import AsyncClient
from shardcron.client.types import HandlerTask, JobSpec, Schedule
from shardcron.coordinator import service
from shardcron.coordinator.node import Node
from shardcron.coordinator.open_calls import CallLimits, LongCall
from shardcron.v1 import jobs_pb2, jobs_pb2_grpc
from shardcron.worker import Worker, registry
from tests.support.local_node import sqlite_node
from tests.support.waiting import until


@contextlib.asynccontextmanager
async def node_and_worker(tmp_path: Path, follows: int = 32) -> AsyncIterator[Node]:
    """A node (SQLite, port 0) whose principals may hold ``follows`` follows, and a
    worker serving the built-in handlers."""
    base = sqlite_node(tmp_path, "n")
    config = dataclasses.replace(base.config, call_limits=CallLimits(follows=follows))
    node = Node(base.raw_store, base.coordination, config)
    await node.start()
    worker = Worker(f"127.0.0.1:{node.port}", worker_id="w", slots=2, registry=registry)
    task = asyncio.create_task(worker.run())
    try:
        yield node
    finally:
        await worker.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await node.stop(0)


async def test_the_sdk_follows_again_when_the_node_ends_a_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "FOLLOW_MAX", 0.3)
    async with node_and_worker(tmp_path) as node:
        client = AsyncClient(f"127.0.0.1:{node.port}", owner="f", timeout=10)
        job = await client.create_job(
            JobSpec(name="slow", task=HandlerTask(name="sleep", payload=b"2")),
        )
        [run] = (await client.list_runs(job.id)).items
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{node.port}")
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        raw = stub.ReadRunOutput(
            jobs_pb2.ReadRunOutputRequest(run_id=run.id, follow=True),
            metadata=(("x-shardcron-owner", "f"),),
        )
        # the node ends a follow after FOLLOW_MAX, without an eof, while the run sleeps
        assert [c.eof async for c in raw] in ([], [False])
        await channel.close()
        # the SDK takes it up again, and again, until the run's eof
        chunks = [c async for c in client.read_output(run.id, follow=True)]
        assert chunks and chunks[-1].eof
        assert (await client.get_run(run.id)).is_final
        await client.close()


async def test_follows_past_the_principals_limit_are_refused(tmp_path: Path) -> None:
    async with node_and_worker(tmp_path, follows=2) as node:
        client = AsyncClient(f"127.0.0.1:{node.port}", owner="f", timeout=10)
        job = await client.create_job(
            JobSpec(
                name="far",
                task=HandlerTask(name="noop"),
                schedule=Schedule.cron_expr("0 0 1 1 *"),
            )
        )
        [run] = (await client.list_runs(job.id)).items

        async def follow() -> None:
            async for _ in client.read_output(run.id, follow=True):
                pass

        followers = [asyncio.create_task(follow()) for _ in range(2)]
        await until(lambda: node.open_calls.total(LongCall.FOLLOW) == 2)
        with pytest.raises(ResourceExhausted, match="^max_follows:"):
            await follow()
        for f in followers:
            f.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
        await until(lambda: node.open_calls.total(LongCall.FOLLOW) == 0)
        await client.close()

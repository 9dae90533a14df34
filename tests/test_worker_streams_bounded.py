"""What a node takes of worker streams (issue 32), on a real in-process node over gRPC:
a Hello within ``client.limits`` (one past them ends its stream INVALID_ARGUMENT naming
the field, and takes no place), at most ``max_worker_streams`` streams per principal,
and a worker that never says more of itself than a node takes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import grpc.aio
import pytest
from click.testing import CliRunner

from shardcron.client.errors import InvalidArgument
from shardcron.client.sdk import AsyncClient
from shardcron.client.types import HandlerTask, JobSpec, RunState, Schedule
from shardcron.coordinator.open_calls import CallLimits, LongCall
from shardcron.main import cli
from shardcron.worker import Worker
from shardcron.worker.handlers import HandlerRegistry
from tests.support.auth import TOKENS, auth_node
from tests.support.local_node import started_node
from tests.support.waiting import until
from tests.support.worker_streams import WAIT, WIDE_HANDLERS, WIDE_LABELS, first_of, open_stream


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"labels": {f"k{i}": "v" for i in range(65)}}, "hello.labels: at most 64 labels"),
        ({"labels": {"zone": "v" * 257}}, "hello.labels[zone]"),
        ({"handlers": [f"h{i}" for i in range(1001)]}, "hello.handlers: at most 1000"),
        ({"handlers": ["h" * 201]}, "hello.handlers"),
        ({"version": "v" * 65}, "hello.version"),
        ({"instance_id": "i" * 129}, "hello.instance_id"),
        ({"worker_id": "w" * 129}, "hello.worker_id"),
    ],
)
async def test_a_hello_past_the_bounds_ends_its_stream_naming_the_field(
    tmp_path: Path, fields: dict, named: str
) -> None:
    async with (
        started_node(tmp_path, "n") as node,
        grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel,
    ):
        fields.setdefault("worker_id", "w-big")
        refused = await first_of(await open_stream(channel, **fields))
        assert refused.startswith(f"INVALID_ARGUMENT: {named}"), refused
        # nothing of it stayed: the poller books no such worker
        assert node.poller is not None
        assert [w.id for w in node.poller.workers()] == []
        # a Hello at every bound is taken
        widest = await open_stream(
            channel, "w-" + "x" * 126, labels=WIDE_LABELS, handlers=WIDE_HANDLERS
        )
        assert await first_of(widest) == "welcome"
        widest.cancel()


async def test_a_run_is_served_while_oversized_hellos_pour_in(tmp_path: Path) -> None:
    """Another owner's job runs on a real worker while 100 oversized Hellos are refused."""
    async with (
        started_node(tmp_path, "n") as node,
        grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel,
    ):
        target = f"127.0.0.1:{node.port}"
        worker = Worker(target, worker_id="good", slots=2, registry=HandlerRegistry(builtins=True))
        running = asyncio.create_task(worker.run())
        try:
            await until(lambda: worker.connected, WAIT, "the good worker's Welcome")
            attack = [
                await open_stream(channel, f"bad-{i}", handlers=[f"h{j}" for j in range(1001)])
                for i in range(100)
            ]
            async with AsyncClient(target, owner="b") as client:
                job = await client.create_job(
                    JobSpec(
                        name="on-time", task=HandlerTask(name="noop"), schedule=Schedule.immediate()
                    )
                )
                [run] = (await client.list_runs(job.id)).items
                ended = await client.wait_run(run.id, timeout=WAIT)
            outcomes = await asyncio.gather(*(first_of(call) for call in attack))
            assert ended.state == RunState.SUCCEEDED
            assert all(o.startswith("INVALID_ARGUMENT: hello.handlers") for o in outcomes)
        finally:
            await worker.stop()
            await running


async def test_worker_streams_are_capped_per_principal(tmp_path: Path) -> None:
    """``max_worker_streams``: the stream past a principal's limit is refused naming it,
    another principal still connects, a closed stream frees its place, and a refused
    Hello holds none."""
    cap = 3
    async with (
        auth_node(tmp_path, call_limits=CallLimits(worker_streams=cap)) as node,
        grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel,
    ):
        for i in range(cap + 2):  # refused Hellos take no place
            bad = await open_stream(channel, f"bad-{i}", principal="worker", version="v" * 65)
            assert (await first_of(bad)).startswith("INVALID_ARGUMENT: hello.version")
        streams = [await open_stream(channel, f"a-{i}", principal="worker") for i in range(cap)]
        assert [await first_of(s) for s in streams] == ["welcome"] * cap
        past = await first_of(await open_stream(channel, "a-past", principal="worker"))
        assert past.startswith("RESOURCE_EXHAUSTED: max_worker_streams: principal worker has 3")
        other = await open_stream(channel, "b-0", principal="worker-b")
        assert await first_of(other) == "welcome"
        streams[0].cancel()
        await until(
            lambda: node.open_calls.count(LongCall.WORKER_STREAM, "worker") < cap,
            WAIT,
            "the closed stream's place",
        )
        again = await open_stream(channel, "a-again", principal="worker")
        assert await first_of(again) == "welcome"
        for call in (*streams, other, again):
            call.cancel()


def test_a_worker_never_says_more_of_itself_than_a_node_takes() -> None:
    """Labels or an id past the bounds are refused when the worker is made (the CLI says
    so and stops); a registry refuses a handler name too long, or one too many."""
    with pytest.raises(InvalidArgument) as labels:
        Worker("127.0.0.1:1", labels={"zone": "v" * 257})
    assert labels.value.field == "labels[zone]"
    with pytest.raises(InvalidArgument) as worker_id:
        Worker("127.0.0.1:1", worker_id="w" * 129)
    assert worker_id.value.field == "worker_id"
    registry = HandlerRegistry()
    with pytest.raises(ValueError, match="at most 200 characters"):
        registry.register("h" * 201, lambda ctx: None)
    for name in WIDE_HANDLERS:
        registry.register(name, lambda ctx: None)
    with pytest.raises(ValueError, match="at most 1000 handlers"):
        registry.register("one-more", lambda ctx: None)
    registry.register(WIDE_HANDLERS[0], lambda ctx: None)  # replacing one is fine
    Worker("127.0.0.1:1", labels=WIDE_LABELS, registry=registry)
    result = CliRunner().invoke(cli, ["worker", "--label", "zone=" + "v" * 257])
    assert result.exit_code != 0
    assert "cannot start: labels[zone]" in result.output


async def test_the_widest_worker_connects(tmp_path: Path) -> None:
    """A worker at every bound (64 labels, 1000 handlers of 200 characters) is taken."""
    registry = HandlerRegistry()
    for name in WIDE_HANDLERS:
        registry.register(name, lambda ctx: None)
    async with auth_node(tmp_path) as node:
        worker = Worker(
            f"127.0.0.1:{node.port}",
            labels=WIDE_LABELS,
            registry=registry,
            token=TOKENS["worker"],
        )
        running = asyncio.create_task(worker.run())
        try:
            await until(lambda: worker.connected, WAIT, "Welcome")
        finally:
            await worker.stop()
            await running

"""Regression tests for what fuzzing the node found (tests/test_fuzz.py), one per bug.

Each drives a real node (SQLite, built in-process on port 0) with raw gRPC.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
import pytest_asyncio

from shardcron.v1 import worker_pb2
from tests.support.local_node import sqlite_node

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def channel(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[grpc.aio.Channel]:
    data: Path = tmp_path_factory.mktemp("regressions")
    node = sqlite_node(data, "regressions")
    await node.start()
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{node.port}")
    try:
        yield ch
    finally:
        await ch.close()
        await node.stop()


def _raw_connect(channel: grpc.aio.Channel) -> grpc.aio.StreamStreamMultiCallable:
    return channel.stream_stream(
        "/shardcron.v1.WorkerService/Connect",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )


async def _connect_with_a_bad_second_message(channel: grpc.aio.Channel, worker_id: str) -> None:
    hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id=worker_id, slots=1))
    heartbeat = worker_pb2.WorkerMessage(
        heartbeat=worker_pb2.Heartbeat(leases=[worker_pb2.LeaseRef(run_id="RUNX")])
    )
    bad = heartbeat.SerializeToString().replace(b"RUNX", b"R\xffNX")
    call = _raw_connect(channel)(iter([hello.SerializeToString(), bad]), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        async for _ in call:
            pass
    assert (e.value.code(), e.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "heartbeat.leases[0].run_id: not valid UTF-8",
    )


async def test_invalid_utf8_in_a_worker_message_after_the_hello_is_invalid_argument_not_a_hang(
    channel: grpc.aio.Channel,
) -> None:
    """A message that does not decode, read by the stream's reader task rather than by the
    handler itself, ended the call from that task while the handler wrote the Welcome:
    the status was lost and the worker's call hung until its deadline (one stream in a
    few; twenty at once show it)."""
    await asyncio.gather(*(_connect_with_a_bad_second_message(channel, f"w{i}") for i in range(20)))


async def test_the_node_still_takes_a_worker_after_a_stream_that_did_not_decode(
    channel: grpc.aio.Channel,
) -> None:
    hello = worker_pb2.WorkerMessage(hello=worker_pb2.Hello(worker_id="after", slots=1))
    call = _raw_connect(channel)(timeout=5)
    await call.write(hello.SerializeToString())
    first = await asyncio.wait_for(call.read(), 5)
    assert worker_pb2.PollerMessage.FromString(first).WhichOneof("body") == "welcome"
    call.cancel()

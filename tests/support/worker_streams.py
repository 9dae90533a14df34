"""Lease streams opened by hand over gRPC, as a worker (or an attacker) would: a Hello
of any content, then whatever the node answers first."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import grpc
import grpc.aio

from shardcron.client import limits
from shardcron.v1 import worker_pb2, worker_pb2_grpc
from tests.support.auth import bearer

WAIT = 30.0
# a Hello at every bound: what the widest worker a node takes says of itself
WIDE_LABELS = {f"{i:02d}" + "k" * 61: "v" * 256 for i in range(limits.MAX_LABELS)}
WIDE_HANDLERS = [f"{i:04d}" + "h" * 196 for i in range(limits.MAX_WORKER_HANDLERS)]


async def open_stream(
    channel: grpc.aio.Channel,
    worker_id: str,
    *,
    principal: str | None = None,
    labels: Mapping[str, str] | None = None,
    handlers: Sequence[str] = ("noop",),
    **fields: str,
) -> grpc.aio.StreamStreamCall:
    """A lease stream opened with a Hello (as ``principal``, with an auth file); more
    Hello ``fields`` as given (``version``, ``instance_id``, ...)."""
    call = worker_pb2_grpc.WorkerServiceStub(channel).Connect(
        metadata=bearer(principal) if principal else None
    )
    hello = worker_pb2.Hello(
        worker_id=worker_id,
        slots=2,
        labels=labels or {},
        handlers=list(handlers),
        instance_id=fields.pop("instance_id", "i1"),
        **fields,
    )
    await call.write(worker_pb2.WorkerMessage(hello=hello))
    return call


async def first_of(call: grpc.aio.StreamStreamCall) -> str:
    """The kind of the stream's first message ("welcome"), or "CODE: details" of the
    status that ended it."""
    try:
        msg = await asyncio.wait_for(call.read(), WAIT)
    except grpc.aio.AioRpcError as e:
        return f"{e.code().name}: {e.details()}"
    assert msg is not grpc.aio.EOF, "the stream ended without a status"
    return msg.WhichOneof("body")

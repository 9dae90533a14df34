"""A run's output over HTTP: JSON, Server-Sent Events, or text.

``GET /v1/runs/{runId}/output`` reads through ``ReadRunOutput``, from ``offset``
(negative: from the end):

- as JSON ``{"chunks": [OutputChunk...]}``, the output kept so far;
- with ``format=text``, as the bytes themselves (``text/plain``);
- with ``follow=true``, as Server-Sent Events while the run writes: one ``chunk`` event
  per piece (its data an ``OutputChunk``'s JSON, the bytes base64; its ``id`` the offset
  after it, so an ``EventSource`` that reconnects sends it back as ``Last-Event-ID``
  and resumes there), then one ``eof`` event once the run is final or its job deleted;
  with ``format=text`` too, as the bytes until then (``curl -N`` shows it as it is
  written).

A follow answers its headers as soon as the run is found and the follow admitted (the
caller's ``max_follows``, ``open_calls``), before any output exists; errors before that
are answered as any route's. It ends within ``GONE_CHECK`` seconds of its client going
away, when a write to a client that does not read takes ``WRITE_TIMEOUT``, and, without
an ``eof``, when the node ends a long follow (``service.FOLLOW_MAX``): the client
follows again from where it was. Once the stream has started, a failure ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from aiohttp import web

from shardcron.client.errors import InvalidArgument
from shardcron.coordinator.http.mapping import to_json
from shardcron.coordinator.http.services import Services
from shardcron.v1 import jobs_pb2, types_pb2

log = logging.getLogger("shardcron.http")

GONE_CHECK = 0.5  # seconds between looks at whether a follow's client is still there
WRITE_TIMEOUT = 30.0  # seconds a write to a follow's client may wait for it to read

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "chunks": {
            "type": "array",
            "items": {"$ref": "#/components/schemas/shardcron.v1.OutputChunk"},
        }
    },
}


async def read_output(
    services: Services, request: web.Request, message: jobs_pb2.ReadRunOutputRequest
) -> web.StreamResponse:
    as_text = request.query.get("format", "json") == "text"
    if not message.follow:
        chunks = [c async for c in services.stream("ReadRunOutput", message, request)]
        if as_text:
            body = b"".join(c.data for c in chunks)
            return web.Response(body=body, content_type="text/plain", charset="utf-8")
        return web.json_response({"chunks": [to_json(c) for c in chunks]})
    resume = request.headers.get("Last-Event-ID")
    if resume is not None and not as_text:
        try:
            message.offset = int(resume)
        except ValueError:
            raise InvalidArgument("Last-Event-ID", "must be an offset (an integer)") from None
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/plain; charset=utf-8" if as_text else "text/event-stream",
            "Cache-Control": "no-cache",
        }
    )

    async def begin() -> None:
        if not response.prepared:
            await response.prepare(request)

    chunks = services.stream("ReadRunOutput", message, request, on_begin=begin)
    try:
        await until_gone(request, _pump(chunks, response, begin, as_text))
    except Exception:
        if not response.prepared:
            raise  # answered as the route's error
        log.warning("output stream of %s ended by a failure", message.run_id, exc_info=True)
    finally:
        with contextlib.suppress(Exception):
            await chunks.aclose()  # type: ignore[attr-defined]
    if response.prepared:
        with contextlib.suppress(ConnectionResetError, OSError, RuntimeError):
            await response.write_eof()
    return response


async def _pump(
    chunks: AsyncIterator[types_pb2.OutputChunk],
    response: web.StreamResponse,
    begin: Any,
    as_text: bool,
) -> None:
    async for chunk in chunks:
        await begin()
        if as_text:
            if not chunk.data:
                continue
            piece = chunk.data
        else:
            event = "eof" if chunk.eof else "chunk"
            after = chunk.offset + len(chunk.data)
            piece = f"event: {event}\nid: {after}\ndata: {json.dumps(to_json(chunk))}\n\n".encode()
        try:
            await asyncio.wait_for(response.write(piece), WRITE_TIMEOUT)
        except (TimeoutError, ConnectionResetError, OSError):
            return  # the client went away, or reads no more


def gone(request: web.Request) -> bool:
    """Whether the client of ``request`` has closed its connection."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def until_gone(request: web.Request, work: Coroutine[Any, Any, None]) -> None:
    """Runs ``work``, cancelled within ``GONE_CHECK`` seconds of the client going away
    (aiohttp itself does not cancel a handler whose client left)."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=GONE_CHECK)
            if not task.done() and gone(request):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return
        task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def read_result(
    services: Services, request: web.Request, message: jobs_pb2.ReadRunResultRequest
) -> web.StreamResponse:
    """``GET /v1/runs/{runId}/results/{name}``: the bytes of one of a run's result files
    (``ReadRunResult``), from ``offset``, at most ``limit``, as a download. Errors before
    its first byte are answered as any route's; once it has begun, a failure ends it."""
    pieces = services.stream("ReadRunResult", message, request)
    response: web.StreamResponse | None = None
    async for piece in pieces:
        if response is None:
            response = await _begin_download(request, message.name)
        await response.write(piece.data)
    if response is None:  # an empty file, or a range past nothing
        response = await _begin_download(request, message.name)
    await response.write_eof()
    return response


async def _begin_download(request: web.Request, name: str) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "application/octet-stream",
            # a result file's name is of the blob key alphabet: nothing to quote
            "Content-Disposition": f'attachment; filename="{name}"',
            "X-Content-Type-Options": "nosniff",
        }
    )
    await response.prepare(request)
    return response

"""A run's output over HTTP: JSON, Server-Sent Events, or text.

``GET /v1/runs/{runId}/output`` reads through ``ReadRunOutput``, from ``offset``
(negative: from the end):

- as JSON ``{"chunks": [OutputChunk...]}``, the output kept so far;
- with ``follow=true``, as Server-Sent Events while the run writes: one ``chunk`` event
  per piece (its data an ``OutputChunk``'s JSON, the bytes base64), then one ``eof``
  event once the run is final; ``EventSource`` clients resume with ``offset``;
- with ``format=text``, as the bytes themselves (``text/plain``, chunked), and with
  ``follow=true`` too until the run is final: ``curl -N`` shows it as it is written.

Errors before the first byte (an unknown run, bad input) are answered as any route's;
once the stream has started, a failure ends it (the client sees it end early).
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

from aiohttp import web

from shardcron.coordinator.http.mapping import to_json
from shardcron.coordinator.http.services import Services
from shardcron.v1 import jobs_pb2

log = logging.getLogger("shardcron.http")

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
    chunks = aiter(services.stream("ReadRunOutput", message, request))
    first = await anext(chunks, None)  # errors here are answered as the route's
    if not message.follow and not as_text:
        pieces = [] if first is None else [first, *[c async for c in chunks]]
        return web.json_response({"chunks": [to_json(c) for c in pieces]})
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/plain; charset=utf-8" if as_text else "text/event-stream",
            "Cache-Control": "no-cache",
        }
    )
    await response.prepare(request)
    try:
        chunk = first
        while chunk is not None:
            if as_text:
                if chunk.data:
                    await response.write(chunk.data)
            else:
                event = "eof" if chunk.eof else "chunk"
                await response.write(
                    f"event: {event}\ndata: {json.dumps(to_json(chunk))}\n\n".encode()
                )
            chunk = await anext(chunks, None)
    except (ConnectionResetError, OSError):
        pass  # the client went away
    except Exception:
        log.exception("output stream of %s failed", message.run_id)
    finally:
        with contextlib.suppress(Exception):
            await chunks.aclose()  # type: ignore[attr-defined]
    with contextlib.suppress(ConnectionResetError, OSError):
        await response.write_eof()
    return response

"""A request's body: read within its caps and its time, decoded without stalling the node.

A body is read only after its request's credential was judged (``server``): a caller
who is not known never makes the node read, hold or parse a byte of it. Then:

- **Caps.** ``json_cap(limit)`` bytes at most, ``limit`` being the owner's
  ``max_request_bytes`` (``quotas``): JSON spells bytes in base64 and numbers as text,
  so the JSON of a request may be about twice its size as gRPC receives it. A
  ``Content-Length`` over the cap is refused before anything is read; a chunked body
  as soon as it passes it. The request built from it is then held to ``limit`` itself,
  by the same check as over gRPC (``QuotaGuard.check_request``), in ``server``.
  Refused: RESOURCE_EXHAUSTED naming ``max_request_bytes``, HTTP 413.
- **Time.** The whole body must arrive within ``body_timeout`` seconds
  (``connections.ConnectionLimits``), else 408 and the connection is closed.
- **Shape.** JSON nested deeper than ``MAX_DEPTH`` levels is refused (no request of
  the API nests half as deep), and so is anything that is not JSON: INVALID_ARGUMENT
  naming ``body``, never a traceback.
- **Off the loop.** A body over ``SMALL_BODY`` is decoded in a thread, one at a time
  per node (``LARGE_DECODES``), so that a client sending large bodies takes a share of
  the CPU, not the event loop every other call and every run's lease waits on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from shardcron.client.errors import InvalidArgument, ResourceExhausted, ShardcronError

T = TypeVar("T")

MAX_DEPTH = 32
SMALL_BODY = 64 << 10  # bytes: bodies up to this are decoded on the event loop
LARGE_DECODES = 1  # large bodies decoded at once, per node
_JSON_SLACK = 64 << 10


class BodyTooLarge(ResourceExhausted):
    """A body over its cap (answered 413)."""


class BodyTimeout(ShardcronError):
    """A body that did not arrive in time (answered 408, the connection closed)."""

    code = "DEADLINE_EXCEEDED"


def json_cap(limit: int) -> int:
    """The most bytes of JSON read for a request of at most ``limit`` bytes."""
    return 2 * limit + _JSON_SLACK


async def read_body(request: web.Request, *, cap: int, limit: int, seconds: float) -> bytes:
    """The body of ``request``, at most ``cap`` bytes, within ``seconds``."""
    declared = request.content_length
    if declared is not None and declared > cap:
        raise _too_large(declared, limit)
    pieces: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(seconds):
            async for piece in request.content.iter_any():
                size += len(piece)
                if size > cap:
                    raise _too_large(size, limit)
                pieces.append(piece)
    except TimeoutError:
        raise BodyTimeout(f"body: not received within {seconds:g}s") from None
    return b"".join(pieces)


def _too_large(size: int, limit: int) -> BodyTooLarge:
    return BodyTooLarge(
        f"max_request_bytes: a JSON body of {size} bytes or more, over the"
        f" {json_cap(limit)} bytes read for a request of at most {limit} bytes"
    )


def parse_json(raw: bytes) -> dict[str, Any]:
    """A request body: empty, or a JSON object nested at most ``MAX_DEPTH`` deep.
    Raises ``InvalidArgument`` (field ``body``)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except RecursionError:
        raise InvalidArgument("body", f"nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidArgument("body", f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidArgument("body", "must be a JSON object")
    _check_depth(value)
    return value


def _check_depth(value: Any) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidArgument("body", f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))


class Decoder:
    """Runs the decoding of a request: at once for a small body, in a thread (one at a
    time) for a large one."""

    def __init__(self) -> None:
        self._large = asyncio.Semaphore(LARGE_DECODES)

    async def decode(self, size: int, work: Callable[[], T]) -> T:
        if size <= SMALL_BODY:
            return work()
        async with self._large:
            return await asyncio.to_thread(work)

"""The ``max_request_bytes`` quota at the gRPC edge: a JobService request of an owner
larger than its limit is refused with RESOURCE_EXHAUSTED before it is decoded.

``RequestSizeInterceptor`` sits inside the audit interceptor (so a refusal is audited)
and outside the decoding one, whose handlers take the raw request bytes: the size
checked is the size received.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from shardcron.client.codec import status_for
from shardcron.client.errors import ShardcronError
from shardcron.coordinator.interceptors import Behavior, UnaryJobServiceInterceptor
from shardcron.coordinator.quotas import QuotaGuard

OwnerOf = Callable[[grpc.aio.ServicerContext], str]


class RequestSizeInterceptor(UnaryJobServiceInterceptor):
    """Refuses a unary JobService request over its owner's ``max_request_bytes``."""

    def __init__(self, guard: QuotaGuard, *, owner_of: OwnerOf) -> None:
        self.guard = guard
        self.owner_of = owner_of

    def wrap_unary(self, method: str, behavior: Behavior) -> Behavior:
        async def sized(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if isinstance(request, bytes):
                try:
                    self.guard.check_request(self.owner_of(context), len(request))
                except ShardcronError as e:
                    await context.abort(*status_for(e))
            return await behavior(request, context)

        return sized

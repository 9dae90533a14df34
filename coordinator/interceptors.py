"""What the JobService interceptors share: wrapping the behaviour of each unary call.

``UnaryJobServiceInterceptor`` hands ``wrap`` the method name and behaviour of every
unary-unary JobService method; whatever ``wrap`` returns replaces the behaviour (None
leaves it). What the behaviour receives depends on the interceptors inside it: the
raw request bytes when the decoding interceptor (``request_decoding``) runs inside.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

JOB_SERVICE = "shardcron.v1.JobService"

Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class UnaryJobServiceInterceptor(grpc.aio.ServerInterceptor):
    """Base of an interceptor of the JobService's unary calls; subclasses write ``wrap``."""

    def wrap(self, method: str, behavior: Behavior) -> Behavior | None:
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        service, _, method = handler_call_details.method.lstrip("/").partition("/")
        behavior = getattr(handler, "unary_unary", None)
        if service != JOB_SERVICE or behavior is None:
            return handler
        wrapped = self.wrap(method, behavior)
        return handler if wrapped is None else handler._replace(unary_unary=wrapped)

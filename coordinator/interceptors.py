"""What every server interceptor of a node shares: replacing the behaviour of each call.

gRPC hands an interceptor a method's handler, whose behaviour is one of four shapes
(``handler_kind``). ``BehaviorInterceptor`` is the one place that takes the handler
apart and puts it back: a subclass writes ``wrap``, given the full method name, the
handler and its behaviour, and returns the behaviour to serve instead (None leaves the
handler as it is). ``UnaryJobServiceInterceptor`` narrows that to the JobService's
unary calls (``wrap_unary``, given the method's short name). What a behaviour receives
depends on the interceptors inside it: the raw request bytes when the decoding
interceptor (``request_decoding``) runs inside.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

JOB_SERVICE = "shardcron.v1.JobService"

Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def handler_kind(handler: grpc.RpcMethodHandler) -> str:
    """Which of a method handler's four behaviors it has: ``unary_unary``, ``unary_stream``,
    ``stream_unary`` or ``stream_stream`` (also the name of the field that holds it)."""
    requests = "stream" if handler.request_streaming else "unary"
    return f"{requests}_{'stream' if handler.response_streaming else 'unary'}"


class BehaviorInterceptor(grpc.aio.ServerInterceptor):
    """Base of every interceptor of a node; subclasses write ``wrap``."""

    def wrap(
        self, method: str, handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]
    ) -> Callable[..., Any] | None:
        """The behaviour to serve ``method`` with instead of ``behavior``; None: as is."""
        raise NotImplementedError

    def replaced(
        self, handler: grpc.RpcMethodHandler, kind: str, behavior: Callable[..., Any]
    ) -> grpc.RpcMethodHandler:
        """``handler`` serving ``behavior``; a subclass may change more of it."""
        return handler._replace(**{kind: behavior})  # type: ignore[attr-defined,no-any-return]

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not hasattr(handler, "_replace"):
            return handler
        kind = handler_kind(handler)
        behavior = self.wrap(handler_call_details.method, handler, getattr(handler, kind))
        return handler if behavior is None else self.replaced(handler, kind, behavior)


class UnaryJobServiceInterceptor(BehaviorInterceptor):
    """An interceptor of the JobService's unary calls only; subclasses write
    ``wrap_unary``."""

    def wrap_unary(self, method: str, behavior: Behavior) -> Behavior | None:
        raise NotImplementedError

    def wrap(
        self, method: str, handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]
    ) -> Callable[..., Any] | None:
        service, _, name = method.lstrip("/").partition("/")
        if service != JOB_SERVICE or handler_kind(handler) != "unary_unary":
            return None
        return self.wrap_unary(name, behavior)

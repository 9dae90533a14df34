"""Per-method gRPC metrics of a node's server: calls, errors by status code, duration.

``MetricsInterceptor`` wraps every method handler of the server (it is the first
interceptor, so it also sees the INVALID_ARGUMENT of a request that does not decode)
and counts each call in ``shardcron_grpc_requests_total{service,method}`` when it
starts, in ``shardcron_grpc_errors_total{service,method,code}`` when it ends with a
status other than OK, and, for a call answered with one message, its duration in
``shardcron_grpc_seconds{service,method}`` (a stream lasts as long as it is open, the
lease stream for days: its life is no latency and would drown the buckets).

The status of a call is the one the servicer set (``context.abort`` or
``set_code``); a servicer that raised anything else ends UNKNOWN, and a call the
client cancelled ends CANCELLED, as gRPC itself reports them. Label values come from
the methods the server registered, never from what a client sent: a call to a method
that does not exist reaches no handler and is not counted, so the series stay bounded.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio

from shardcron.coordinator.interceptors import BehaviorInterceptor
from shardcron.coordinator.metrics import Metrics


def split_method(full_method: str) -> tuple[str, str]:
    """``/shardcron.v1.JobService/GetJob`` -> ``("shardcron.v1.JobService", "GetJob")``."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service, method


class _Call:
    """One call being measured: counted at start, its end recorded once."""

    def __init__(self, metrics: Metrics, service: str, method: str, *, timed: bool) -> None:
        self._metrics = metrics
        self._labels = {"service": service, "method": method}
        self._timed = timed
        self._started = time.perf_counter()
        metrics.grpc_requests.labels(**self._labels).inc()

    def ended(self, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
        if self._timed:
            self._metrics.grpc_duration.labels(**self._labels).observe(
                time.perf_counter() - self._started
            )
        code = _status_of(context, error)
        if code != grpc.StatusCode.OK:
            self._metrics.grpc_errors.labels(**self._labels, code=code.name).inc()


def _status_of(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    """The status the call ends with: set by the servicer, or what gRPC makes of ``error``."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        if code != grpc.StatusCode.OK or error is None:
            return code
    elif isinstance(code, int):  # some grpcio versions keep the raw status number
        status = next((c for c in grpc.StatusCode if c.value[0] == code), None)
        if status is not None and (status != grpc.StatusCode.OK or error is None):
            return status
    if error is None:
        return grpc.StatusCode.OK
    if isinstance(error, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


def _measured(behavior: Callable[..., Any], start: Callable[[], _Call]) -> Callable[..., Any]:
    """``behavior`` (any of gRPC's four shapes, async) with each call measured."""
    if not (inspect.isasyncgenfunction(behavior) or inspect.iscoroutinefunction(behavior)):
        return behavior  # a blocking handler: gRPC runs it on a thread; not measured
    if inspect.isasyncgenfunction(behavior):

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            call = start()
            try:
                async for item in behavior(request, context):
                    yield item
            except BaseException as error:
                call.ended(context, error)
                raise
            call.ended(context, None)

        return streaming

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        call = start()
        try:
            result = await behavior(request, context)
        except BaseException as error:
            call.ended(context, error)
            raise
        call.ended(context, None)
        return result

    return unary


class MetricsInterceptor(BehaviorInterceptor):
    """Measures every call of the server it is given to; see the module docstring."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def wrap(
        self, method: str, handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]
    ) -> Callable[..., Any]:
        service, name = split_method(method)
        metrics = self._metrics
        timed = not handler.response_streaming

        def start() -> _Call:
            return _Call(metrics, service, name, timed=timed)

        return _measured(behavior, start)

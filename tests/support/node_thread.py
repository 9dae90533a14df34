"""A node and one worker running on their own event loop in their own thread, called over
gRPC from the test's thread as a client process would call a server.

``NodeThread`` builds a real node in-process (api, poller and coordinator on SQLite,
port 0) and one in-process ``Worker`` that serves the handlers ``noop`` (returns at
once) and ``fail`` (raises) and never runs commands, so no command a test sends is
ever executed. It keeps what a test needs to judge the node afterwards: the calls
made, the status codes they got, every time the poller reset (a spy on the poller,
while the poller does not count them itself) and every error the node logged, with
its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

import grpc

from shardcron.coordinator.node import Node
from shardcron.worker import HandlerRegistry, Worker
from tests.support.local_node import sqlite_node

T = TypeVar("T")
CALL_TIMEOUT = 10.0  # seconds: a call that takes longer is a hang


def _identity(data: bytes) -> bytes:
    return data


def _fail(ctx: Any) -> None:
    raise RuntimeError("fails on purpose")


class _ErrorLog(logging.Handler):
    """Keeps every ERROR the node logs, with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


class NodeThread:
    """See the module docstring. ``start`` then ``stop``; calls in between."""

    def __init__(self, data: Path, *, http: bool = False) -> None:
        self._data = data
        self._http = http  # serve the HTTP/JSON API too (``http_url``)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="node", daemon=True)
        self.node: Node | None = None
        self.worker: Worker | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self.channel: grpc.Channel | None = None
        self.calls = 0
        self.codes: Counter[str] = Counter()
        self.errors = _ErrorLog()

    @property
    def target(self) -> str:
        assert self.node is not None
        return f"127.0.0.1:{self.node.port}"

    @property
    def http_url(self) -> str:
        assert self.node is not None and self.node.http_port
        return f"http://127.0.0.1:{self.node.http_port}"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Runs ``coro`` on the node's loop and returns its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> NodeThread:
        self._thread.start()
        logging.getLogger("shardcron").addHandler(self.errors)
        self.run(self._start())
        self.channel = grpc.insecure_channel(self.target)
        return self

    async def _start(self) -> None:
        self.node = sqlite_node(self._data, "fuzzed", http=self._http)
        await self.node.start()
        registry = HandlerRegistry()
        registry.register("noop", lambda ctx: None)
        registry.register("fail", _fail)
        self.worker = Worker(
            self.target, worker_id="in-process", slots=4, registry=registry, runs_commands=False
        )
        self._worker_task = asyncio.create_task(self.worker.run())

    def stop(self) -> None:
        if self.channel is not None:
            self.channel.close()
        with contextlib.suppress(Exception):
            self.run(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        logging.getLogger("shardcron").removeHandler(self.errors)

    async def _stop(self) -> None:
        if self.worker is not None:
            await asyncio.wait_for(self.worker.stop(), 10)
        if self._worker_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._worker_task, 10)
        if self.node is not None:
            await self.node.stop()

    @property
    def resets(self) -> int:
        """How often the poller dropped what it held and reloaded its shards."""
        return int(self.metric("shardcron_poller_resets_total") or 0)

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of the node's metric sample ``name``; None when there is none."""
        assert self.node is not None
        return self.node.metrics.registry.get_sample_value(name, labels)

    # --- raw calls, bytes in and out, as any client could send them ---------------

    def _done(self, code: grpc.StatusCode) -> None:
        self.calls += 1
        self.codes[code.name] += 1

    def unary(
        self,
        path: str,
        data: bytes,
        metadata: Iterable[tuple[str, str]] = (),
        timeout: float = CALL_TIMEOUT,
    ) -> tuple[grpc.StatusCode, str]:
        """The status of calling unary ``path`` (``/pkg.Service/Method``) with ``data``."""
        assert self.channel is not None
        call = self.channel.unary_unary(
            path, request_serializer=_identity, response_deserializer=_identity
        )
        try:
            call(data, metadata=tuple(metadata), timeout=timeout)
            status = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            status = e.code(), e.details() or ""  # type: ignore[attr-defined]
        self._done(status[0])
        return status

    def streamed(
        self,
        path: str,
        requests: Iterable[bytes],
        metadata: Iterable[tuple[str, str]] = (),
        *,
        timeout: float = CALL_TIMEOUT,
        client_streaming: bool = False,
    ) -> tuple[grpc.StatusCode, str]:
        """The status a streaming call ends with, its answers read to the end."""
        assert self.channel is not None
        if client_streaming:
            call: Any = self.channel.stream_stream(
                path, request_serializer=_identity, response_deserializer=_identity
            )
            answers = call(iter(requests), metadata=tuple(metadata), timeout=timeout)
        else:
            call = self.channel.unary_stream(
                path, request_serializer=_identity, response_deserializer=_identity
            )
            [request] = requests
            answers = call(request, metadata=tuple(metadata), timeout=timeout)
        try:
            for _ in answers:
                pass
            status = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            status = e.code(), e.details() or ""  # type: ignore[attr-defined]
        self._done(status[0])
        return status

"""A poller played by the test: ``ScriptedPoller`` serves ``WorkerService.Connect``
and answers a real ``Worker`` as the test scripts it (leases to send, renewals to grant
or refuse, results to acknowledge), so the worker's side of the lease stream is tested
without a node; with the leases, workers and servers to drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
from google.protobuf.duration_pb2 import Duration

from shardcron.v1 import types_pb2, worker_pb2, worker_pb2_grpc
from shardcron.worker import HandlerRegistry, Worker
from tests.support.waiting import until

RenewPolicy = Callable[[str], bool | None]  # run_id -> ok, or None: do not answer


def dur(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class ScriptedPoller(worker_pb2_grpc.WorkerServiceServicer):
    """Stands in for the poller: records what the worker sends, answers per policy."""

    def __init__(
        self,
        *,
        lease_ttl: float = 5.0,
        heartbeat: float = 0.1,
        renew: RenewPolicy = lambda run_id: True,
        ack: bool = True,
        stamp_expiry: bool = False,
        not_owner: Callable[[str], bool] = lambda run_id: False,
    ) -> None:
        self.lease_ttl = lease_ttl
        self.stamp_expiry = stamp_expiry  # ok renewals carry expires_at = now + lease_ttl
        self.heartbeat = heartbeat
        self.renew = renew
        self.ack = ack
        self.not_owner = not_owner  # run_id -> its shard is not served here (checked first)
        self.hellos: list[worker_pb2.Hello] = []
        self.received: list[worker_pb2.WorkerMessage] = []
        self._out: asyncio.Queue[worker_pb2.PollerMessage | None] | None = None

    # what arrived
    def of_kind(self, kind: str) -> list:
        return [getattr(m, kind) for m in self.received if m.WhichOneof("body") == kind]

    @property
    def results(self) -> dict[str, worker_pb2.RunResult]:
        return {r.run_id: r for msg in self.of_kind("results") for r in msg.results}

    def output(self, run_id: str, stream: str) -> bytes:
        return b"".join(
            c.data
            for msg in self.of_kind("output")
            for c in msg.chunks
            if c.run_id == run_id and c.stream == stream
        )

    # what to send
    def send(self, **body: object) -> None:
        assert self._out is not None, "no stream"
        self._out.put_nowait(worker_pb2.PollerMessage(**body))

    def lease(self, *leases: worker_pb2.Lease) -> None:
        self.send(leases=worker_pb2.Leases(leases=leases))

    def close_stream(self) -> None:
        assert self._out is not None
        self._out.put_nowait(None)

    async def Connect(self, request_iterator, context):  # noqa: N802 - gRPC method name
        first = await context.read()
        assert first.WhichOneof("body") == "hello"
        self.hellos.append(first.hello)
        out: asyncio.Queue[worker_pb2.PollerMessage | None] = asyncio.Queue()
        self._out = out
        welcome = worker_pb2.Welcome(
            poller_id="test-poller",
            epoch=1,
            lease_ttl=dur(self.lease_ttl),
            heartbeat_interval=dur(self.heartbeat),
        )
        await context.write(worker_pb2.PollerMessage(welcome=welcome))
        self._answer(first.hello.held, first.hello.pending_results)
        reader = asyncio.create_task(self._read(context))
        try:
            while (msg := await out.get()) is not None:
                await context.write(msg)
        finally:
            reader.cancel()

    async def _read(self, context) -> None:
        while (msg := await context.read()) is not grpc.aio.EOF:
            self.received.append(msg)
            kind = msg.WhichOneof("body")
            if kind == "heartbeat":
                self._answer(msg.heartbeat.leases, [])
            elif kind == "results":
                self._answer([], msg.results.results)

    def _answer(self, refs, results) -> None:
        renewals = []
        for ref in refs:
            if self.not_owner(ref.run_id):
                renewals.append(
                    worker_pb2.Renewal(
                        run_id=ref.run_id, fencing_token=ref.fencing_token, not_owner=True
                    )
                )
                continue
            ok = self.renew(ref.run_id)
            if ok is not None:
                renewal = worker_pb2.Renewal(
                    run_id=ref.run_id, fencing_token=ref.fencing_token, ok=ok
                )
                if ok and self.stamp_expiry:
                    renewal.expires_at.FromDatetime(
                        datetime.now(UTC) + timedelta(seconds=self.lease_ttl)
                    )
                renewals.append(renewal)
        if renewals:
            self.send(
                renewals=worker_pb2.Renewals(renewals=renewals, lease_ttl=dur(self.lease_ttl))
            )
        if self.ack and results:
            acks = [
                worker_pb2.ResultAck(
                    run_id=r.run_id,
                    fencing_token=r.fencing_token,
                    accepted=not self.not_owner(r.run_id),
                    not_owner=self.not_owner(r.run_id),
                )
                for r in results
            ]
            self.send(acks=worker_pb2.ResultAcks(acks=acks))


@contextlib.asynccontextmanager
async def serve(poller: ScriptedPoller, port: int = 0) -> AsyncIterator[int]:
    server = grpc.aio.server()
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(poller, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield bound
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        await asyncio.wait_for(worker.stop(), 10)
        await asyncio.wait_for(task, 10)


def handler_lease(run_id: str, name: str, payload: bytes = b"", token: int = 1, **kw):
    task = types_pb2.Task(handler=types_pb2.HandlerTask(name=name, payload=payload))
    return worker_pb2.Lease(
        run_id=run_id, job_id="job-" + run_id, fencing_token=token, task=task, **kw
    )


def command_lease(run_id: str, argv: list[str], token: int = 1, **kw):
    task = types_pb2.Task(command=types_pb2.CommandTask(argv=argv))
    return worker_pb2.Lease(
        run_id=run_id, job_id="job-" + run_id, fencing_token=token, task=task, **kw
    )


def pid_command(pidfile: Path, seconds: int = 30) -> list[str]:
    return ["sh", "-c", f"echo $$ > {pidfile}; exec sleep {seconds}"]


async def read_pid(pidfile: Path) -> int:
    await until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="pid file")
    return int(pidfile.read_text())


def make_worker(port: int, **kw) -> Worker:
    kw.setdefault("registry", HandlerRegistry(builtins=True))
    kw.setdefault("kill_grace", 1.0)
    return Worker(f"127.0.0.1:{port}", **kw)

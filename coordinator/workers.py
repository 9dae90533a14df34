"""The poller's side of the lease stream: one WorkerConn per connected worker.

``WorkerStreamServicer`` serves ``WorkerService.Connect``: it turns the worker's
messages into poller inbox events and drains the connection's outbox into the
response stream. ``WorkerConn`` is the poller's book of a worker — capacity,
labels, handlers, the runs it holds — and batches everything the poller sends it
during one turn into one message per kind (one lease per message is 30x slower
than 100 per message: BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.duration_pb2 import Duration

from shardcron.client.convert import resources_to_proto, task_to_proto
from shardcron.client.types import (
    CommandTask,
    HandlerTask,
    Job,
    JobSpec,
    Resources,
    Run,
    RunReason,
    RunState,
    WorkerInfo,
)
from shardcron.coordinator.ids import utcnow
from shardcron.v1 import types_pb2, worker_pb2, worker_pb2_grpc

if TYPE_CHECKING:
    from shardcron.coordinator.poller import Poller

log = logging.getLogger("shardcron.workers")

_FINAL_FROM_PROTO = {
    types_pb2.RUN_STATE_SUCCEEDED: RunState.SUCCEEDED,
    types_pb2.RUN_STATE_FAILED: RunState.FAILED,
    types_pb2.RUN_STATE_TIMED_OUT: RunState.TIMED_OUT,
    types_pb2.RUN_STATE_CANCELLED: RunState.CANCELLED,
}


def _duration(td: timedelta) -> Duration:
    d = Duration()
    d.FromTimedelta(td)
    return d


def _ts(dt: datetime | None) -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    t = Timestamp()
    if dt is not None:
        t.FromDatetime(dt)
    return t


def result_fields(
    result: worker_pb2.RunResult,
) -> tuple[RunState, RunReason, int | None, str, datetime | None, datetime | None]:
    """A worker's RunResult as (state, reason, exit_code, error, started_at, ended_at)."""
    state = _FINAL_FROM_PROTO.get(result.state, RunState.FAILED)
    reason_name = types_pb2.RunReason.Name(result.reason).removeprefix("RUN_REASON_")
    reason = RunReason.NONE if reason_name == "UNSPECIFIED" else RunReason(reason_name)
    if state == RunState.FAILED and reason == RunReason.NONE:
        reason = RunReason.NON_ZERO_EXIT if result.has_exit_code else RunReason.HANDLER_ERROR
    exit_code = result.exit_code if result.has_exit_code else None
    started = (
        result.started_at.ToDatetime(tzinfo=utcnow().tzinfo)
        if result.HasField("started_at")
        else None
    )
    ended = (
        result.ended_at.ToDatetime(tzinfo=utcnow().tzinfo) if result.HasField("ended_at") else None
    )
    return state, reason, exit_code, result.error, started, ended


class WorkerConn:
    """One open lease stream, as the poller sees it."""

    def __init__(self, hello: worker_pb2.Hello, peer: str) -> None:
        self.id = hello.worker_id
        self.address = peer
        self.slots = max(1, hello.slots)
        self.limit = self.slots
        self.cpu_millis = hello.cpu_millis
        self.memory_mb = hello.memory_mb
        self.labels = dict(hello.labels)
        self.handlers = frozenset(hello.handlers)
        self.runs_commands = hello.runs_commands
        self.hello_held = [(r.run_id, r.fencing_token) for r in hello.held]
        self.hello_results = list(hello.pending_results)
        self.connected_at = utcnow()
        self.leases: dict[str, Resources] = {}
        self.used = 0
        self.used_cpu = 0
        self.used_mem = 0
        self.outbox: asyncio.Queue[worker_pb2.PollerMessage | None] = asyncio.Queue()
        self._leases: list[worker_pb2.Lease] = []
        self._cancels: list[worker_pb2.Cancel] = []
        self._renewals: list[worker_pb2.Renewal] = []
        self._renewal_ttl = timedelta(0)
        self._acks: list[worker_pb2.ResultAck] = []
        self.closed = False

    @property
    def free(self) -> int:
        return max(0, min(self.slots, self.limit) - self.used)

    def fits(self, spec: JobSpec) -> bool:
        need = spec.resources
        if self.free < (need.slots or 1):
            return False
        if need.cpu_millis and self.used_cpu + need.cpu_millis > self.cpu_millis:
            return False
        if need.memory_mb and self.used_mem + need.memory_mb > self.memory_mb:
            return False
        if any(self.labels.get(k) != v for k, v in need.labels.items()):
            return False
        task = spec.task
        if isinstance(task, CommandTask):
            return self.runs_commands
        return isinstance(task, HandlerTask) and task.name in self.handlers

    def hold(self, run_id: str, need: Resources) -> None:
        if run_id in self.leases:
            return
        self.leases[run_id] = need
        self.used += need.slots or 1
        self.used_cpu += need.cpu_millis
        self.used_mem += need.memory_mb

    def release(self, run_id: str) -> None:
        need = self.leases.pop(run_id, None)
        if need is not None:
            self.used -= need.slots or 1
            self.used_cpu -= need.cpu_millis
            self.used_mem -= need.memory_mb

    def forget_leases(self) -> None:
        """The poller reloads its shards: nothing it decided before may still go out."""
        self.leases.clear()
        self.used = self.used_cpu = self.used_mem = 0
        self._leases, self._cancels, self._renewals, self._acks = [], [], [], []

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.id,
            address=self.address,
            slots_total=self.slots,
            slots_used=self.used,
            labels=dict(self.labels),
            handlers=tuple(sorted(self.handlers)),
            connected_at=self.connected_at,
        )

    # --- outgoing, batched per turn ------------------------------------------------

    def send_welcome(
        self, poller_id: str, epoch: int, ttl: timedelta, heartbeat: timedelta
    ) -> None:
        welcome = worker_pb2.Welcome(
            poller_id=poller_id,
            epoch=epoch,
            lease_ttl=_duration(ttl),
            heartbeat_interval=_duration(heartbeat),
        )
        self.outbox.put_nowait(worker_pb2.PollerMessage(welcome=welcome))

    def send_lease(self, run: Run, job: Job, ttl: timedelta) -> None:
        spec = job.spec
        lease = worker_pb2.Lease(
            run_id=run.id,
            job_id=run.job_id,
            owner=run.owner,
            fencing_token=run.lease_token,
            attempt=run.attempt,
            fire_at=_ts(run.fire_at),
            due_at=_ts(run.due_at),
            task=task_to_proto(spec.task),
            lease_ttl=_duration(ttl),
            resources=resources_to_proto(spec.resources),
            job_name=spec.name,
        )
        if spec.timeout is not None:
            lease.timeout.CopyFrom(_duration(spec.timeout))
        self._leases.append(lease)

    def send_cancel(self, run_id: str, token: int, reason: RunReason) -> None:
        proto_reason = (
            types_pb2.RunReason.Value(f"RUN_REASON_{reason.value}") if reason.value else 0
        )
        self._cancels.append(
            worker_pb2.Cancel(run_id=run_id, fencing_token=token, reason=proto_reason)
        )

    def send_renewals(self, answers: list[tuple[str, int, bool]], ttl: timedelta) -> None:
        self._renewals.extend(
            worker_pb2.Renewal(run_id=r, fencing_token=t, ok=ok) for r, t, ok in answers
        )
        self._renewal_ttl = ttl

    def send_ack(self, run_id: str, token: int, accepted: bool, reason: str) -> None:
        self._acks.append(
            worker_pb2.ResultAck(
                run_id=run_id, fencing_token=token, accepted=accepted, reason=reason
            )
        )

    def flush(self) -> None:
        if self.closed:
            return
        if self._leases:
            self.outbox.put_nowait(
                worker_pb2.PollerMessage(leases=worker_pb2.Leases(leases=self._leases))
            )
            self._leases = []
        if self._cancels:
            self.outbox.put_nowait(
                worker_pb2.PollerMessage(cancels=worker_pb2.Cancels(cancels=self._cancels))
            )
            self._cancels = []
        if self._renewals:
            renewals = worker_pb2.Renewals(
                renewals=self._renewals, lease_ttl=_duration(self._renewal_ttl)
            )
            self.outbox.put_nowait(worker_pb2.PollerMessage(renewals=renewals))
            self._renewals = []
        if self._acks:
            self.outbox.put_nowait(
                worker_pb2.PollerMessage(acks=worker_pb2.ResultAcks(acks=self._acks))
            )
            self._acks = []

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.outbox.put_nowait(None)


class WorkerStreamServicer(worker_pb2_grpc.WorkerServiceServicer):
    """Serves the lease stream for one poller."""

    def __init__(self, poller: Poller) -> None:
        self._poller = poller

    async def Connect(
        self,
        request_iterator: AsyncIterator[worker_pb2.WorkerMessage],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[worker_pb2.PollerMessage]:
        try:
            first = await request_iterator.__anext__()
        except StopAsyncIteration:
            return
        if first.WhichOneof("body") != "hello" or not first.hello.worker_id:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "hello: the first message must be a Hello with a worker_id",
            )
        conn = WorkerConn(first.hello, context.peer())
        self._poller.submit("hello", conn)

        async def read() -> None:
            try:
                async for msg in request_iterator:
                    self._poller.submit("msg", conn, msg)
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("worker %s: stream read failed", conn.id)
            finally:
                self._poller.submit("closed", conn)
                conn.close()

        reader = asyncio.create_task(read())
        try:
            while True:
                msg = await conn.outbox.get()
                if msg is None:
                    break
                yield msg
        finally:
            reader.cancel()
            conn.closed = True
            self._poller.submit("closed", conn)

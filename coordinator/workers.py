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
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.duration_pb2 import Duration

from shardcron.client.codec import resources_to_proto, task_to_proto
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
from shardcron.coordinator.poller.events import WorkerClosed, WorkerConnected, WorkerMessage
from shardcron.v1 import types_pb2, worker_pb2, worker_pb2_grpc

if TYPE_CHECKING:
    from shardcron.coordinator.poller import Poller

log = logging.getLogger("shardcron.workers")

DEMAND_REFRESH = 1.0  # seconds between repeats of an unchanged, standing Demand

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
        # the worker's credits for this stream (Credits, or Hello.credit_limit)
        self.limit = (
            min(self.slots, max(0, hello.credit_limit))
            if hello.HasField("credit_limit")
            else self.slots
        )
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
        # (lease generation, message): Leases of an older generation are not sent
        self.outbox: asyncio.Queue[tuple[int, worker_pb2.PollerMessage] | None] = asyncio.Queue()
        self.lease_gen = 0
        self._leases: list[worker_pb2.Lease] = []
        self._cancels: list[worker_pb2.Cancel] = []
        self._renewals: list[worker_pb2.Renewal] = []
        self._renewal_ttl = timedelta(0)
        self._acks: list[worker_pb2.ResultAck] = []
        self._demand_sent = 0  # the worker starts a stream's demand at 0
        self._demand_sent_at = 0.0
        self._demand: int | None = None
        self.closed = False

    @property
    def free(self) -> int:
        return max(0, min(self.slots, self.limit) - self.used)

    @property
    def restricted(self) -> bool:
        """The worker shares its slots with other pollers: it wants our Demand."""
        return self.limit < self.slots

    def fits(self, spec: JobSpec) -> bool:
        need = spec.resources
        if self.free < (need.slots or 1):
            return False
        if need.cpu_millis and self.used_cpu + need.cpu_millis > self.cpu_millis:
            return False
        if need.memory_mb and self.used_mem + need.memory_mb > self.memory_mb:
            return False
        return self.could_run(spec)

    def could_run(self, spec: JobSpec) -> bool:
        """The worker can run this kind of run at all, when it has room."""
        need = spec.resources
        if (need.slots or 1) > self.slots:
            return False
        if need.cpu_millis > self.cpu_millis or need.memory_mb > self.memory_mb:
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
        self.drop_unsent_leases()
        self.leases.clear()
        self.used = self.used_cpu = self.used_mem = 0
        self._leases, self._cancels, self._renewals, self._acks = [], [], [], []

    def drop_unsent_leases(self) -> None:
        """Leases queued but not yet written to the stream stay unsent (the shards they
        belong to may have moved meanwhile: their runs are reloaded and waited out)."""
        self.lease_gen += 1

    def sendable(self, gen: int, msg: worker_pb2.PollerMessage) -> bool:
        return gen == self.lease_gen or msg.WhichOneof("body") != "leases"

    def _put(self, msg: worker_pb2.PollerMessage) -> None:
        self.outbox.put_nowait((self.lease_gen, msg))

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
        self._put(worker_pb2.PollerMessage(welcome=welcome))

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

    @property
    def demand_standing(self) -> bool:
        """The worker holds a demand of ours other than 0."""
        return (self._demand_sent if self._demand is None else self._demand) > 0

    def send_demand(self, slots: int) -> None:
        """Slots of ready runs this worker could take beyond its credits: sent when it
        changes, and a standing demand again every second (a worker disregards a demand
        whose grant it sees unused, as from a poller that stalled)."""
        again = slots > 0 and time.monotonic() - self._demand_sent_at >= DEMAND_REFRESH
        self._demand = None if slots == self._demand_sent and not again else slots

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
            self._put(worker_pb2.PollerMessage(leases=worker_pb2.Leases(leases=self._leases)))
            self._leases = []
        if self._cancels:
            self._put(worker_pb2.PollerMessage(cancels=worker_pb2.Cancels(cancels=self._cancels)))
            self._cancels = []
        if self._renewals:
            renewals = worker_pb2.Renewals(
                renewals=self._renewals, lease_ttl=_duration(self._renewal_ttl)
            )
            self._put(worker_pb2.PollerMessage(renewals=renewals))
            self._renewals = []
        if self._acks:
            self._put(worker_pb2.PollerMessage(acks=worker_pb2.ResultAcks(acks=self._acks)))
            self._acks = []
        if self._demand is not None:
            self._put(worker_pb2.PollerMessage(demand=worker_pb2.Demand(slots=self._demand)))
            self._demand_sent, self._demand = self._demand, None
            self._demand_sent_at = time.monotonic()

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
        self._poller.submit(WorkerConnected(worker=conn))

        async def read() -> None:
            try:
                async for msg in request_iterator:
                    self._poller.submit(WorkerMessage(worker=conn, message=msg))
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("worker %s: stream read failed", conn.id)
            finally:
                self._poller.submit(WorkerClosed(worker=conn))
                conn.close()

        reader = asyncio.create_task(read())
        try:
            while True:
                item = await conn.outbox.get()
                if item is None:
                    break
                gen, msg = item
                if not conn.sendable(gen, msg) or (
                    msg.WhichOneof("body") == "leases" and not self._poller.may_lease()
                ):
                    # decided before a freeze or a loss of shards: its runs are reloaded
                    # from the store and their leases waited out, never sent late
                    log.warning(
                        "worker %s: %d leases not sent: shard ownership changed or unconfirmed",
                        conn.id,
                        len(msg.leases.leases),
                    )
                    continue
                yield msg
        finally:
            reader.cancel()
            conn.closed = True
            self._poller.submit(WorkerClosed(worker=conn))

"""How an api node reaches the poller that owns a shard, in a cluster.

``ShardRouter`` is the api's ``PollerLink`` when pollers may live on other nodes:
it looks the owner of a run's shard up in the coordination view (cached for a
moment: assignments change rarely) and calls the local poller directly or the
remote one over ``PollerService``. Hints (new runs, changed jobs) are best
effort — pollers also re-read the recent due index and re-read jobs that are
old — and so are waiting reasons (a read goes without them after a short
timeout), while cancels wait for the owner's answer. ``PollerServiceServicer`` is
the receiving side.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import grpc

from shardcron.client import codec
from shardcron.client.errors import ShardcronError, Unavailable
from shardcron.client.types import Job, Run, RunReason
from shardcron.coordinator.coordination import ClusterView, Coordination
from shardcron.coordinator.ids import shard_for
from shardcron.coordinator.poller import Poller
from shardcron.v1 import cluster_pb2, cluster_pb2_grpc, types_pb2

log = logging.getLogger("shardcron.router")
VIEW_TTL = 0.5  # seconds a cached view of shard owners is trusted
CALL_TIMEOUT = 10.0
WAITING_REASONS_TIMEOUT = 1.0  # reads go without reasons rather than wait longer


class ShardRouter:
    def __init__(self, coordination: Coordination, local: Poller | None, shard_count: int) -> None:
        self._coordination = coordination
        self._local = local
        self._shard_count = shard_count
        self._view: ClusterView | None = None
        self._view_at = 0.0
        self._addresses: dict[str, str] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def _owners(self) -> tuple[dict[int, str], dict[str, str]]:
        if self._view is None or time.monotonic() - self._view_at > VIEW_TTL:
            self._view = await self._coordination.view()
            self._addresses = {m.id: m.address for m in await self._coordination.pollers()}
            self._view_at = time.monotonic()
        return self._view.shard_owners, self._addresses

    async def _stub(
        self, shard: int
    ) -> tuple[Poller | None, cluster_pb2_grpc.PollerServiceStub | None]:
        """The local poller if it owns ``shard``, else a stub for the owner; Unavailable if none."""
        if self._local is not None and self._local.owns(shard):
            return self._local, None
        owners, addresses = await self._owners()
        owner = owners.get(shard)
        address = addresses.get(owner or "")
        if owner is None or address is None:
            self._view = None
            raise Unavailable(f"shard {shard} has no poller right now; try again")
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address)
        return None, cluster_pb2_grpc.PollerServiceStub(channel)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- PollerLink ---------------------------------------------------------------

    def runs_created(self, runs: Sequence[Run], jobs: Sequence[Job] = ()) -> None:
        by_shard: dict[int, list[Run]] = defaultdict(list)
        for run in runs:
            by_shard[run.shard].append(run)
        jobs_by_id = {j.id: j for j in jobs}
        for shard, shard_runs in by_shard.items():
            shard_jobs = [jobs_by_id[r.job_id] for r in shard_runs if r.job_id in jobs_by_id]
            self._spawn(self._notify(shard, shard_runs, shard_jobs))

    async def _notify(self, shard: int, runs: list[Run], jobs: list[Job]) -> None:
        try:
            local, stub = await self._stub(shard)
            if local is not None:
                local.runs_created(runs, jobs)
            elif stub is not None:
                request = cluster_pb2.NotifyRunsRequest(
                    runs=[codec.run_to_proto(r) for r in runs],
                    jobs=[codec.job_to_proto(j) for j in jobs],
                )
                await stub.NotifyRuns(request, timeout=CALL_TIMEOUT)
        except (ShardcronError, grpc.aio.AioRpcError) as e:
            log.debug(
                "hint for shard %d not delivered (the poller's scan will find the runs): %s",
                shard,
                e,
            )

    async def cancel(self, run: Run, reason: RunReason) -> Run:
        local, stub = await self._stub(run.shard)
        if local is not None:
            return await local.cancel(run, reason)
        assert stub is not None
        request = cluster_pb2.CancelRunRequest(
            run=codec.run_to_proto(run), reason=codec.run_reason_to_proto(reason)
        )
        try:
            return codec.run_from_proto(await stub.CancelRun(request, timeout=CALL_TIMEOUT))
        except grpc.aio.AioRpcError as e:
            self._view = None
            raise codec.error_from_rpc(e) from e

    def cancel_job(self, job_id: str, reason: RunReason) -> None:
        self._spawn(self._cancel_job(job_id, reason))

    async def _cancel_job(self, job_id: str, reason: RunReason) -> None:
        try:
            local, stub = await self._stub(shard_for(job_id, self._shard_count))
            if local is not None:
                local.cancel_job(job_id, reason)
            elif stub is not None:
                request = cluster_pb2.CancelJobRunsRequest(
                    job_id=job_id, reason=codec.run_reason_to_proto(reason)
                )
                await stub.CancelJobRuns(request, timeout=CALL_TIMEOUT)
        except (ShardcronError, grpc.aio.AioRpcError) as e:
            log.warning("cancelling the runs of job %s failed: %s", job_id, e)

    def job_changed(self, job: Job) -> None:
        self._spawn(self._job_changed(job))

    async def _job_changed(self, job: Job) -> None:
        try:
            local, stub = await self._stub(shard_for(job.id, self._shard_count))
            if local is not None:
                local.job_changed(job)
            elif stub is not None:
                await stub.JobChanged(
                    cluster_pb2.JobChangedRequest(job=codec.job_to_proto(job)),
                    timeout=CALL_TIMEOUT,
                )
        except (ShardcronError, grpc.aio.AioRpcError) as e:
            log.debug("job hint for %s not delivered (pollers re-read jobs): %s", job.id, e)

    async def waiting_reasons(self, runs: Sequence[Run]) -> dict[str, str]:
        by_shard: dict[int, list[Run]] = defaultdict(list)
        for run in runs:
            by_shard[run.shard].append(run)
        answers = await asyncio.gather(
            *(self._waiting_reasons(shard, shard_runs) for shard, shard_runs in by_shard.items())
        )
        return {rid: reason for answer in answers for rid, reason in answer.items()}

    async def _waiting_reasons(self, shard: int, runs: list[Run]) -> dict[str, str]:
        try:
            local, stub = await self._stub(shard)
            if local is not None:
                return await local.waiting_reasons(runs)
            assert stub is not None
            request = cluster_pb2.WaitingReasonsRequest(run_ids=[r.id for r in runs])
            answer = await stub.WaitingReasons(request, timeout=WAITING_REASONS_TIMEOUT)
            return dict(answer.reasons)
        except (ShardcronError, grpc.aio.AioRpcError) as e:
            log.debug("no waiting reasons from the poller of shard %d: %s", shard, e)
            return {}

    async def poller_statuses(self) -> list[cluster_pb2.PollerStatus]:
        """Every poller's own view of its shards and workers (unreachable ones left out)."""
        _, addresses = await self._owners()
        out = []
        for poller_id, address in addresses.items():
            if self._local is not None and poller_id == self._local.poller_id:
                out.append(local_status(self._local))
                continue
            channel = self._channels.get(address) or grpc.aio.insecure_channel(address)
            self._channels[address] = channel
            try:
                stub = cluster_pb2_grpc.PollerServiceStub(channel)
                out.append(await stub.GetPollerStatus(cluster_pb2.GetStatusRequest(), timeout=5))
            except grpc.aio.AioRpcError as e:
                log.warning("poller %s at %s did not answer: %s", poller_id, address, e.code())
        return out

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for channel in self._channels.values():
            await channel.close()


def local_status(poller: Poller) -> cluster_pb2.PollerStatus:
    return cluster_pb2.PollerStatus(
        poller_id=poller.poller_id,
        fencing_epoch=poller.fencing_epoch,
        shards=[codec.shard_info_to_proto(s) for s in poller.shard_lag()],
        workers=[codec.worker_info_to_proto(w) for w in poller.workers()],
    )


class PollerServiceServicer(cluster_pb2_grpc.PollerServiceServicer):
    """The receiving side of ShardRouter, on a node with the poller role."""

    def __init__(self, poller: Poller) -> None:
        self._poller = poller

    async def NotifyRuns(
        self, request: cluster_pb2.NotifyRunsRequest, context: Any
    ) -> cluster_pb2.NotifyRunsResponse:
        runs = [codec.run_from_proto(r) for r in request.runs]
        jobs = [codec.job_from_proto(j) for j in request.jobs]
        self._poller.runs_created(runs, jobs)
        return cluster_pb2.NotifyRunsResponse()

    async def CancelRun(
        self, request: cluster_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Run:
        run = codec.run_from_proto(request.run)
        if not self._poller.owns(run.shard):
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"shard {run.shard} is not served here any more"
            )
        try:
            reason = codec.run_reason_from_proto(request.reason)
            return codec.run_to_proto(await self._poller.cancel(run, reason))
        except ShardcronError as e:
            code, message = codec.status_for(e)
            await context.abort(code, message)
            raise

    async def CancelJobRuns(
        self, request: cluster_pb2.CancelJobRunsRequest, context: Any
    ) -> cluster_pb2.CancelJobRunsResponse:
        self._poller.cancel_job(request.job_id, codec.run_reason_from_proto(request.reason))
        return cluster_pb2.CancelJobRunsResponse()

    async def JobChanged(
        self, request: cluster_pb2.JobChangedRequest, context: Any
    ) -> cluster_pb2.JobChangedResponse:
        self._poller.job_changed(codec.job_from_proto(request.job))
        return cluster_pb2.JobChangedResponse()

    async def GetPollerStatus(
        self, request: cluster_pb2.GetStatusRequest, context: Any
    ) -> cluster_pb2.PollerStatus:
        return local_status(self._poller)

    async def WaitingReasons(
        self, request: cluster_pb2.WaitingReasonsRequest, context: Any
    ) -> cluster_pb2.WaitingReasonsResponse:
        reasons = self._poller.reasons_for(list(request.run_ids))
        return cluster_pb2.WaitingReasonsResponse(reasons=reasons)

"""How an api node reaches the poller that owns a shard, in a cluster.

``ShardRouter`` is the api's ``PollerLink`` when pollers may live on other nodes:
it looks the owner of a run's shard up in the coordination view (which the
coordination keeps until it changes: ``zk/views.py``) and calls the local poller directly or the
remote one over ``PollerService``. Hints (new runs, changed jobs) are best
effort — pollers also re-read the recent due index and re-read jobs that are
old — and so are waiting reasons (a read goes without them after a short
timeout), while cancels wait for the owner's answer. ``PollerServiceServicer`` is
the receiving side. Calls to other nodes use TLS when the router is given
``credentials`` (the node's own ``ServerTls.peer_tls()``) and carry the node's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from shardcron.client import codec, limits
from shardcron.client.errors import InvalidArgument, NotFound, ShardcronError, Unavailable
from shardcron.client.overview import OverviewPart, OverviewWindow
from shardcron.client.sdk.connection import call_metadata
from shardcron.client.types import Job, Run, RunReason, RunState
from shardcron.coordinator.coordination import Coordination
from shardcron.coordinator.ids import run_due_at, shard_for, utcnow
from shardcron.coordinator.poller import Poller
from shardcron.coordinator.status_workers import (
    Viewer,
    listed,
    poller_request,
    requested_viewer,
)
from shardcron.coordinator.validation import identifier, validate_owner
from shardcron.v1 import cluster_pb2, cluster_pb2_grpc, types_pb2

log = logging.getLogger("shardcron.router")
CALL_TIMEOUT = 10.0
WAITING_REASONS_TIMEOUT = 1.0  # reads go without reasons rather than wait longer
OVERVIEW_TIMEOUT = 2.0  # an overview goes without a poller's part rather than wait longer


class ShardRouter:
    def __init__(
        self,
        coordination: Coordination,
        local: Poller | None,
        shard_count: int,
        credentials: grpc.ChannelCredentials | None = None,
        *,
        node_token: str = "",
    ) -> None:
        self._coordination = coordination
        self._credentials = credentials
        # every call to another node carries this node's token (nodes with an auth file
        # serve PollerService to the node role only)
        self._metadata = call_metadata(None, node_token)
        self._local = local
        self._shard_count = shard_count
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def _owners(self) -> tuple[dict[int, str], dict[str, str]]:
        view = await self._coordination.view()
        return view.shard_owners, {m.id: m.address for m in await self._coordination.pollers()}

    async def _destination(self, shard: int) -> Poller | str:
        """The local poller if it owns ``shard``, else the owner's address; Unavailable
        if none."""
        if self._local is not None and self._local.owns(shard):
            return self._local
        owners, addresses = await self._owners()
        owner = owners.get(shard)
        address = addresses.get(owner or "")
        if owner is None or address is None:
            raise Unavailable(f"shard {shard} has no poller right now; try again")
        return address

    def _stub_at(self, address: str) -> cluster_pb2_grpc.PollerServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = (
                grpc.aio.secure_channel(address, self._credentials)
                if self._credentials is not None
                else grpc.aio.insecure_channel(address)
            )
        return cluster_pb2_grpc.PollerServiceStub(channel)

    async def _stub(
        self, shard: int
    ) -> tuple[Poller | None, cluster_pb2_grpc.PollerServiceStub | None]:
        """The local poller if it owns ``shard``, else a stub for the owner; Unavailable if none."""
        destination = await self._destination(shard)
        if isinstance(destination, str):
            return None, self._stub_at(destination)
        return destination, None

    async def _by_destination(
        self, runs: Sequence[Run], what: str
    ) -> dict[Poller | str, list[Run]]:
        """``runs`` grouped by the poller that holds their shards: one call per poller,
        not one per shard (a batch of creates spans most of the 64 shards). Runs of a
        shard with no poller right now are left out (best effort: ``what`` is logged)."""
        by_shard: dict[int, list[Run]] = defaultdict(list)
        for run in runs:
            by_shard[run.shard].append(run)
        groups: dict[Poller | str, list[Run]] = defaultdict(list)
        for shard, shard_runs in by_shard.items():
            try:
                groups[await self._destination(shard)].extend(shard_runs)
            except ShardcronError as e:
                log.debug("%s for shard %d not delivered: %s", what, shard, e)
        return groups

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- PollerLink ---------------------------------------------------------------

    def runs_created(self, runs: Sequence[Run], jobs: Sequence[Job] = ()) -> None:
        self._spawn(self._notify(runs, jobs))

    async def _notify(self, runs: Sequence[Run], jobs: Sequence[Job]) -> None:
        jobs_by_id = {j.id: j for j in jobs}
        hint = "hint (the poller's scan will find the runs)"
        groups = await self._by_destination(runs, hint)
        await asyncio.gather(
            *(self._notify_one(to, group, jobs_by_id) for to, group in groups.items())
        )

    async def _notify_one(
        self, to: Poller | str, runs: list[Run], jobs_by_id: dict[str, Job]
    ) -> None:
        jobs = list(
            {r.job_id: jobs_by_id[r.job_id] for r in runs if r.job_id in jobs_by_id}.values()
        )
        if not isinstance(to, str):
            to.runs_created(runs, jobs)
            return
        request = cluster_pb2.NotifyRunsRequest(
            run_ids=[r.id for r in runs], job_ids=[r.job_id for r in runs]
        )
        try:
            await self._stub_at(to).NotifyRuns(
                request, timeout=CALL_TIMEOUT, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as e:
            log.debug("hint to %s not delivered (the poller's scan will find the runs): %s", to, e)

    async def cancel(self, run: Run, reason: RunReason) -> Run:
        local, stub = await self._stub(run.shard)
        if local is not None:
            return await local.cancel(run, reason)
        assert stub is not None
        request = cluster_pb2.CancelRunRequest(
            run_id=run.id, reason=codec.run_reason_to_proto(reason)
        )
        try:
            return codec.run_from_proto(
                await stub.CancelRun(request, timeout=CALL_TIMEOUT, metadata=self._metadata)
            )
        except grpc.aio.AioRpcError as e:
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
                await stub.CancelJobRuns(request, timeout=CALL_TIMEOUT, metadata=self._metadata)
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
                    cluster_pb2.JobChangedRequest(job_id=job.id),
                    timeout=CALL_TIMEOUT,
                    metadata=self._metadata,
                )
        except (ShardcronError, grpc.aio.AioRpcError) as e:
            log.debug("job hint for %s not delivered (pollers re-read jobs): %s", job.id, e)

    async def waiting_reasons(self, runs: Sequence[Run]) -> dict[str, str]:
        groups = await self._by_destination(runs, "waiting reasons")
        answers = await asyncio.gather(
            *(self._waiting_reasons(to, group) for to, group in groups.items())
        )
        return {rid: reason for answer in answers for rid, reason in answer.items()}

    async def _waiting_reasons(self, to: Poller | str, runs: list[Run]) -> dict[str, str]:
        if not isinstance(to, str):
            return await to.waiting_reasons(runs)
        request = cluster_pb2.WaitingReasonsRequest(run_ids=[r.id for r in runs])
        try:
            answer = await self._stub_at(to).WaitingReasons(
                request, timeout=WAITING_REASONS_TIMEOUT, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as e:
            log.debug("no waiting reasons from the poller at %s: %s", to, e)
            return {}
        return dict(answer.reasons)

    async def poller_statuses(self, viewer: Viewer) -> list[cluster_pb2.PollerStatus]:
        """Every poller's own view of its shards and of the workers ``viewer`` sees
        (``status_workers``; unreachable pollers left out)."""
        _, addresses = await self._owners()
        out = []
        for poller_id, address in addresses.items():
            if self._local is not None and poller_id == self._local.poller_id:
                out.append(local_status(self._local, viewer))
                continue
            try:
                stub = self._stub_at(address)
                out.append(
                    await stub.GetPollerStatus(
                        poller_request(viewer), timeout=5, metadata=self._metadata
                    )
                )
            except grpc.aio.AioRpcError as e:
                log.warning("poller %s at %s did not answer: %s", poller_id, address, e.code())
        return out

    async def overview_parts(self, owner: str, window: OverviewWindow) -> list[OverviewPart]:
        """Every poller's part of ``owner``'s overview, asked at once (unreachable pollers,
        and parts that cannot be read, left out)."""
        _, addresses = await self._owners()
        request = cluster_pb2.OverviewPartRequest(
            owner=owner, window=codec.overview_window_to_proto(window)
        )

        async def part(poller_id: str, address: str) -> OverviewPart | None:
            if self._local is not None and poller_id == self._local.poller_id:
                return self._local.overview_part(owner, window)
            try:
                answer = await self._stub_at(address).GetOverviewPart(
                    request, timeout=OVERVIEW_TIMEOUT, metadata=self._metadata
                )
                return codec.overview_part_from_proto(answer)
            except grpc.aio.AioRpcError as e:
                log.warning("poller %s at %s gave no overview: %s", poller_id, address, e.code())
            except InvalidArgument as e:
                log.warning(
                    "poller %s at %s gave an unreadable overview: %s", poller_id, address, e
                )
            return None

        answers = await asyncio.gather(*(part(p, a) for p, a in addresses.items()))
        return [a for a in answers if a is not None]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for channel in self._channels.values():
            await channel.close()


def local_status(poller: Poller, viewer: Viewer) -> cluster_pb2.PollerStatus:
    """The poller's shards and the workers ``viewer`` sees, as many as a status lists."""
    workers, omitted = listed(poller.workers(), viewer)
    return cluster_pb2.PollerStatus(
        poller_id=poller.poller_id,
        fencing_epoch=poller.fencing_epoch,
        shards=[codec.shard_info_to_proto(s) for s in poller.shard_lag()],
        workers=[codec.worker_info_to_proto(w) for w in workers],
        workers_omitted=omitted,
    )


class PollerServiceServicer(cluster_pb2_grpc.PollerServiceServicer):
    """The receiving side of ShardRouter, on a node with the poller role.

    Requests name runs and jobs by id; what the poller acts on is read from the store
    here, so a hint naming a run or job that is not stored does nothing, and a cancel
    of one is NOT_FOUND."""

    def __init__(self, poller: Poller) -> None:
        self._poller = poller

    async def NotifyRuns(
        self, request: cluster_pb2.NotifyRunsRequest, context: grpc.aio.ServicerContext
    ) -> cluster_pb2.NotifyRunsResponse:
        async with _answered(context):
            poller = self._poller
            named = _run_jobs(request)
            # the runs the poller holds already (its scan found them first) are not read
            ids = [i for i in _ids(request.run_ids, "run_ids") if poller.phase_of(i) is None]
            if ids:
                await self._runs_created(ids, {i: named[i] for i in ids if i in named})
        return cluster_pb2.NotifyRunsResponse()

    async def _runs_created(self, ids: list[str], named: dict[str, str]) -> None:
        """Hands the poller the hinted runs that are stored PENDING in its shards, with
        their jobs as stored. With each run's job named, the runs are read under their
        jobs and the jobs beside them (one round of reads, not three in a row: a fresh
        run due now waits for them); a run not stored under the job named is ignored.
        The jobs of runs due past ``PollerConfig.job_read_until`` are not read: the
        poller reads them as the runs trigger."""
        store = self._poller.store
        until = self._poller.config.job_read_until(utcnow())
        if named:
            # a run due past ``until`` has its job read as it triggers: the id tells
            wanted = {
                job_id
                for run_id, job_id in named.items()
                if (due := run_due_at(run_id)) is None or due <= until
            }
            stored, jobs = await asyncio.gather(
                store.get_runs(ids, job_ids=named), store.get_jobs(list(wanted))
            )
        else:
            stored, jobs, wanted = await store.get_runs(ids), {}, set()
        runs = [
            r for r in stored.values() if r.state == RunState.PENDING and self._poller.owns(r.shard)
        ]
        if runs and not named:
            wanted = {r.job_id for r in runs if r.due_at <= until}
            jobs = await store.get_jobs(list(wanted))
        # a job read and not found: the create failed after writing its runs
        runs = [r for r in runs if r.job_id in jobs or r.job_id not in wanted]
        if runs:
            self._poller.runs_created(
                runs, [jobs[j] for j in {r.job_id for r in runs} if j in jobs]
            )

    async def CancelRun(
        self, request: cluster_pb2.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> types_pb2.Run:
        async with _answered(context):
            run_id = identifier(request.run_id, "run_id")
            reason = codec.run_reason_from_proto(request.reason)
            run = (await self._poller.store.get_runs([run_id])).get(run_id)
            if run is None:
                raise NotFound(f"run {run_id} not found")
            if not self._poller.owns(run.shard):
                raise Unavailable(f"shard {run.shard} is not served here any more")
            return codec.run_to_proto(await self._poller.cancel(run, reason))
        raise AssertionError("unreachable")

    async def CancelJobRuns(
        self, request: cluster_pb2.CancelJobRunsRequest, context: grpc.aio.ServicerContext
    ) -> cluster_pb2.CancelJobRunsResponse:
        async with _answered(context):
            job_id = identifier(request.job_id, "job_id")
            self._poller.cancel_job(job_id, codec.run_reason_from_proto(request.reason))
        return cluster_pb2.CancelJobRunsResponse()

    async def JobChanged(
        self, request: cluster_pb2.JobChangedRequest, context: grpc.aio.ServicerContext
    ) -> cluster_pb2.JobChangedResponse:
        async with _answered(context):
            job_id = identifier(request.job_id, "job_id")
            job = (await self._poller.store.get_jobs([job_id])).get(job_id)
            if job is not None:
                self._poller.job_changed(job)
        return cluster_pb2.JobChangedResponse()

    async def GetPollerStatus(
        self, request: cluster_pb2.PollerStatusRequest, context: Any
    ) -> cluster_pb2.PollerStatus:
        return local_status(self._poller, requested_viewer(request))

    async def WaitingReasons(
        self, request: cluster_pb2.WaitingReasonsRequest, context: Any
    ) -> cluster_pb2.WaitingReasonsResponse:
        reasons = self._poller.reasons_for(list(request.run_ids))
        return cluster_pb2.WaitingReasonsResponse(reasons=reasons)

    async def GetOverviewPart(
        self, request: cluster_pb2.OverviewPartRequest, context: Any
    ) -> cluster_pb2.OverviewPart:
        part = cluster_pb2.OverviewPart()
        async with _answered(context):
            try:
                owner = validate_owner(request.owner)
            except InvalidArgument as e:
                raise InvalidArgument("owner", e.reason) from None
            window = codec.overview_window_from_proto(request.window)
            part = codec.overview_part_to_proto(self._poller.overview_part(owner, window))
        return part


def _ids(values: Sequence[str], field: str) -> list[str]:
    """The ids a request names, each checked, at most ``limits.MAX_BATCH`` of them."""
    if len(values) > limits.MAX_BATCH:
        raise InvalidArgument(field, f"at most {limits.MAX_BATCH} ids")
    return [identifier(v, f"{field}[{i}]") for i, v in enumerate(values)]


def _run_jobs(request: cluster_pb2.NotifyRunsRequest) -> dict[str, str]:
    """Run id -> job id as a hint names them; empty when the sender names no jobs."""
    if not request.job_ids:
        return {}
    if len(request.job_ids) != len(request.run_ids):
        raise InvalidArgument("job_ids", "one job id per run id")
    return dict(zip(request.run_ids, _ids(request.job_ids, "job_ids"), strict=True))


@contextlib.asynccontextmanager
async def _answered(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    """Ends the call with the status of a domain error raised inside."""
    try:
        yield
    except ShardcronError as e:
        await context.abort(*codec.status_for(e))

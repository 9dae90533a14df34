"""gRPC edge of a node: thin servicers (decode, call, encode) and the server builder.

Domain errors become status codes through ``shardcron.client.codec.status_for``
(the one table, which also caps the message so the trailer always fits); anything
unexpected is INTERNAL and logged. A request that does not decode is INVALID_ARGUMENT
(``request_decoding``). Health checking and server reflection are served so grpcurl
and load balancers work.

Every answer fits a client that keeps gRPC's default 4 MiB receive limit: pages of
the List calls end early, with a token, once their items pass ``PAGE_BYTES``; a
``CreateJobs`` whose reply could not fit is refused before anything is written. A
message received over ``MAX_MESSAGE_BYTES`` ends only the call that sent it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from shardcron.client import codec, limits
from shardcron.client.codec.common import get_duration, get_time
from shardcron.client.codec.notify import (
    delivery_to_proto,
    notify_from_proto,
    notify_settings_to_proto,
)
from shardcron.client.errors import FailedPrecondition, InvalidArgument, ShardcronError
from shardcron.client.types import (
    DEFAULT_OWNER,
    OWNER_HEADER,
    ClusterStatus,
    Job,
    Page,
    ShardInfo,
)
from shardcron.coordinator.api import JobsApi
from shardcron.coordinator.artifacts import Artifacts
from shardcron.coordinator.audit import ANONYMOUS, AuditInterceptor, log_write
from shardcron.coordinator.auth import AuthInterceptor, AuthSource, current_caller
from shardcron.coordinator.coordination import Coordination
from shardcron.coordinator.grpc_metrics import MetricsInterceptor
from shardcron.coordinator.health import ServiceHealth
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.open_calls import LongCall, OpenCalls
from shardcron.coordinator.output_blobs import OutputBlobs
from shardcron.coordinator.poller import Poller
from shardcron.coordinator.request_decoding import DecodingInterceptor
from shardcron.coordinator.request_size import RequestSizeInterceptor
from shardcron.coordinator.result_blobs import ResultBlobs
from shardcron.coordinator.router import PollerServiceServicer, ShardRouter
from shardcron.coordinator.status_workers import listed, merge_workers, viewer_of
from shardcron.coordinator.store_rules import PAGE_BYTES, PageKind, fit_page, owner_runs_key
from shardcron.coordinator.validation import (
    labels,
    page_size,
    page_token,
    text,
    validate_owner,
)
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import (
    cluster_pb2,
    cluster_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    types_pb2,
    worker_pb2,
    worker_pb2_grpc,
)

log = logging.getLogger("shardcron.service")
# A follow reads the store every FOLLOW_POLL seconds while output arrives, less often
# (up to FOLLOW_IDLE_POLL) while none does, looks at the run's job every FOLLOW_JOB_CHECK
# (a deleted job's waiting run may never end), and ends, with no eof, after FOLLOW_MAX:
# the client follows again from the offset it reached.
FOLLOW_POLL = 0.2
FOLLOW_IDLE_POLL = 1.0
FOLLOW_JOB_CHECK = 5.0
FOLLOW_MAX = 600.0
WAIT_ANSWER_MARGIN = 0.5  # seconds before a WaitRun caller's deadline that the wait ends
T = TypeVar("T")
M = TypeVar("M", bound=Message)
# The largest message a node takes, on any call (gRPC sets it per server): a worker
# sends output in 64 KiB messages, and the largest valid job is about 1.2 MiB.
MAX_MESSAGE_BYTES = 4 << 20
# What a created job's reply adds to its request item, beyond the owner's name: the
# server-set fields (id, state, versions, three times, next fire key, the anchor of an
# interval) and framing; tests/e2e/test_limits.py checks it bounds the real reply.
JOB_REPLY_OVERHEAD = 320
ID_REPLY_OVERHEAD = 160  # a CreateJobResponse with the job's id alone, at most


def _job_id_only(job: Job) -> types_pb2.Job:
    return types_pb2.Job(id=job.id)


def owner_of(context: grpc.aio.ServicerContext) -> str:
    """The owner the call acts for: from its credential (``auth``), else its header."""
    caller = current_caller()
    if caller is not None:
        return caller.owner
    for key, value in context.invocation_metadata() or ():
        if key == OWNER_HEADER:
            return validate_owner(value)
    return DEFAULT_OWNER


def principal_of(_context: object = None) -> str:
    """The name of the principal behind the call being served (either edge: the caller
    is set for its task), "anonymous" without an auth file."""
    caller = current_caller()
    return caller.principal if caller is not None and caller.principal else ANONYMOUS


async def _abort_with(context: grpc.aio.ServicerContext, e: Exception, name: str) -> None:
    """Ends the call with the status of ``e``: its code for a domain error, INTERNAL (and
    logged) for anything else."""
    if isinstance(e, ShardcronError):
        code, message = codec.status_for(e)
    else:
        log.exception("%s failed", name)
        code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}"
    await context.abort(code, message)


def rpc(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Maps domain errors to status codes for a unary method."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await _abort_with(context, e, method.__name__)
        raise AssertionError("unreachable")

    return wrapper


def fitted(kind: PageKind, page: Page[Any], encode: Callable[[Any], M]) -> tuple[list[M], str]:
    """The page's items encoded, as many as fit in ``PAGE_BYTES``, and its next token."""
    encoded = [encode(item) for item in page.items]
    key = owner_runs_key if kind == PageKind.OWNER_RUNS else (lambda item: item.id)
    kept = fit_page(kind, page, [m.ByteSize() for m in encoded], key)
    return encoded[: len(kept.items)], kept.next_page_token


def stream_rpc(method: Callable[..., AsyncIterator[T]]) -> Callable[..., AsyncIterator[T]]:
    """``rpc`` for a method that streams its answer."""

    @functools.wraps(method)
    async def wrapper(
        self: Any, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[T]:
        try:
            async for item in method(self, request, context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            await _abort_with(context, e, method.__name__)

    return wrapper


class JobServiceServicer(jobs_pb2_grpc.JobServiceServicer):
    """The JobService over ``api``; the long calls (``WaitRun``, a follow of a run's
    output) each held under the caller's limit in ``open_calls``."""

    def __init__(self, api: JobsApi, open_calls: OpenCalls | None = None) -> None:
        self.api = api
        self.open_calls = open_calls or OpenCalls()

    @rpc
    async def CreateJob(
        self, request: jobs_pb2.CreateJobRequest, context: Any
    ) -> jobs_pb2.CreateJobResponse:
        spec = codec.job_spec_from_proto(request.spec, "spec")
        [(job, created)] = await self.api.create_jobs(
            owner_of(context), [(spec, request.idempotency_key)]
        )
        return jobs_pb2.CreateJobResponse(job=codec.job_to_proto(job), created=created)

    @rpc
    async def CreateJobs(
        self, request: jobs_pb2.CreateJobsRequest, context: Any
    ) -> jobs_pb2.CreateJobsResponse:
        owner = owner_of(context)
        specs = codec.job_specs_from_proto((r.spec for r in request.jobs), "jobs[{}].spec")
        items = [(spec, r.idempotency_key) for spec, r in zip(specs, request.jobs, strict=True)]
        if not items:
            raise InvalidArgument("jobs", "must not be empty")
        if request.ids_only:
            reply = len(items) * ID_REPLY_OVERHEAD
        else:
            reply = request.ByteSize() + len(items) * (JOB_REPLY_OVERHEAD + len(owner))
        if reply > PAGE_BYTES:  # refused before any write: never acknowledge less than written
            raise InvalidArgument(
                "jobs",
                f"the reply would take up to {reply} bytes, over {PAGE_BYTES}:"
                " send fewer or smaller jobs per call",
            )
        results = await self.api.create_jobs(owner, items)
        encode = _job_id_only if request.ids_only else codec.job_to_proto
        return jobs_pb2.CreateJobsResponse(
            jobs=[jobs_pb2.CreateJobResponse(job=encode(j), created=c) for j, c in results]
        )

    @rpc
    async def GetJob(self, request: jobs_pb2.GetJobRequest, context: Any) -> types_pb2.Job:
        if not request.job_id:
            raise InvalidArgument("job_id", "must not be empty")
        return codec.job_to_proto(await self.api.get_job(owner_of(context), request.job_id))

    @rpc
    async def ListJobs(
        self, request: jobs_pb2.ListJobsRequest, context: Any
    ) -> jobs_pb2.ListJobsResponse:
        states = frozenset(codec.job_state_from_proto(s, "states") for s in request.states)
        labels(request.labels, "labels")
        page = await self.api.list_jobs(
            owner_of(context),
            states=states,
            name_prefix=text(request.name_prefix, "name_prefix", limits.MAX_NAME),
            labels=dict(request.labels),
            page_size=page_size(request.page_size),
            page_token=page_token(request.page_token),
            with_health=request.with_health,
        )
        jobs, token = fitted(PageKind.JOBS, page, codec.job_to_proto)
        return jobs_pb2.ListJobsResponse(jobs=jobs, next_page_token=token)

    @rpc
    async def UpdateJob(self, request: jobs_pb2.UpdateJobRequest, context: Any) -> types_pb2.Job:
        spec = codec.job_spec_from_proto(request.spec, "spec")
        job = await self.api.update_job(
            owner_of(context), request.job_id, spec, request.expected_version
        )
        return codec.job_to_proto(job)

    @rpc
    async def PauseJob(self, request: jobs_pb2.JobRef, context: Any) -> types_pb2.Job:
        job = await self.api.pause_job(owner_of(context), request.job_id, request.expected_version)
        return codec.job_to_proto(job)

    @rpc
    async def ResumeJob(self, request: jobs_pb2.JobRef, context: Any) -> types_pb2.Job:
        job = await self.api.resume_job(owner_of(context), request.job_id, request.expected_version)
        return codec.job_to_proto(job)

    @rpc
    async def RunJobNow(self, request: jobs_pb2.JobRef, context: Any) -> types_pb2.Run:
        return codec.run_to_proto(await self.api.run_job_now(owner_of(context), request.job_id))

    @rpc
    async def DeleteJob(self, request: jobs_pb2.DeleteJobRequest, context: Any) -> types_pb2.Job:
        job = await self.api.delete_job(
            owner_of(context), request.job_id, request.expected_version, request.cancel_running
        )
        return codec.job_to_proto(job)

    @rpc
    async def PreviewFires(
        self, request: jobs_pb2.PreviewFiresRequest, context: Any
    ) -> jobs_pb2.PreviewFiresResponse:
        which = request.WhichOneof("source")
        if which is None:
            raise InvalidArgument("source", "name a job_id or give a schedule")
        source = (
            request.job_id
            if which == "job_id"
            else codec.schedule_from_proto(request.schedule, "schedule")
        )
        after = get_time(request, "after", "")
        fires = await self.api.preview_fires(owner_of(context), source, request.count, after)
        return jobs_pb2.PreviewFiresResponse(fires=[codec.fire_to_proto(f) for f in fires])

    @rpc
    async def ListRuns(
        self, request: jobs_pb2.ListRunsRequest, context: Any
    ) -> jobs_pb2.ListRunsResponse:
        states = frozenset(codec.run_state_from_proto(s, "states") for s in request.states)
        page = await self.api.list_runs(
            owner_of(context),
            request.job_id,
            states=states,
            page_size=page_size(request.page_size),
            page_token=page_token(request.page_token),
        )
        kind = PageKind.RUNS if request.job_id else PageKind.OWNER_RUNS
        runs, token = fitted(kind, page, codec.run_to_proto)
        return jobs_pb2.ListRunsResponse(runs=runs, next_page_token=token)

    @rpc
    async def GetRun(self, request: jobs_pb2.GetRunRequest, context: Any) -> types_pb2.Run:
        return codec.run_to_proto(await self.api.get_run(owner_of(context), request.run_id))

    @rpc
    async def CancelRun(self, request: jobs_pb2.GetRunRequest, context: Any) -> types_pb2.Run:
        return codec.run_to_proto(await self.api.cancel_run(owner_of(context), request.run_id))

    @rpc
    async def WaitRun(self, request: jobs_pb2.WaitRunRequest, context: Any) -> types_pb2.Run:
        left = context.time_remaining()
        # answer while the caller still listens: a little before its own deadline
        cap = None if left is None else max(0.0, left - WAIT_ANSWER_MARGIN)
        owner, timeout = owner_of(context), get_duration(request, "timeout", "")
        with self.open_calls.hold(LongCall.WAIT, principal_of(context)):
            run = await self.api.wait_run(owner, request.run_id, timeout, cap)
        return codec.run_to_proto(run)

    @stream_rpc
    async def ReadRunOutput(
        self, request: jobs_pb2.ReadRunOutputRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[types_pb2.OutputChunk]:
        owner = owner_of(context)
        if not 0 <= request.limit <= limits.MAX_OUTPUT_OFFSET:
            raise InvalidArgument("limit", f"must be in [0, {limits.MAX_OUTPUT_OFFSET}]")
        if request.follow and request.limit:
            raise InvalidArgument("limit", "a follow reads to the run's end: no limit with it")
        if not request.follow:
            offset = request.offset
            left = request.limit or None  # None: to the end
            while left is None or left > 0:
                _, chunks = await self.api.read_output(owner, request.run_id, offset, left)
                if not chunks:
                    return
                for chunk in chunks:
                    yield codec.output_chunk_to_proto(chunk)
                    offset = chunk.offset + len(chunk.data)
                    if left is not None:
                        left -= len(chunk.data)
            return
        with self.open_calls.hold(LongCall.FOLLOW, principal_of(context)):
            async for chunk in self._follow(owner, request.run_id, request.offset, context):
                yield chunk

    @stream_rpc
    async def ReadRunResult(
        self, request: jobs_pb2.ReadRunResultRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[jobs_pb2.RunResultChunk]:
        owner = owner_of(context)
        if not limits.is_result_name(request.name):
            raise InvalidArgument(
                "name", f"{limits.clip(request.name)!r} is not a result file name"
            )
        for field, value in (("offset", request.offset), ("limit", request.limit)):
            if not 0 <= value <= limits.MAX_OUTPUT_OFFSET:
                raise InvalidArgument(field, f"must be in [0, {limits.MAX_OUTPUT_OFFSET}]")
        pieces = self.api.read_result(
            owner, request.run_id, request.name, request.offset, request.limit or None
        )
        async for offset, data in pieces:
            yield jobs_pb2.RunResultChunk(offset=offset, data=data)

    async def _follow(
        self, owner: str, run_id: str, offset: int, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[types_pb2.OutputChunk]:
        """The run's output from ``offset`` as it is written, then an ``eof`` chunk once
        the run is final or its job deleted; ends without one after ``FOLLOW_MAX``. The
        headers go out once the run is found, before any output exists."""
        loop = asyncio.get_running_loop()
        started = job_checked = loop.time()
        pause = FOLLOW_POLL
        begun = False
        while True:
            run, chunks = await self.api.read_output(owner, run_id, offset)
            if not begun:
                begun = True
                await context.send_initial_metadata(())
            for chunk in chunks:
                yield codec.output_chunk_to_proto(chunk)
                offset = chunk.offset + len(chunk.data)
            if chunks:
                pause = FOLLOW_POLL
                continue
            now = loop.time()
            ended = run.is_final
            if not ended and now - job_checked >= FOLLOW_JOB_CHECK:
                job_checked = now
                ended = await self.api.job_deleted(owner, run.job_id)
            if ended:
                yield types_pb2.OutputChunk(run_id=run.id, offset=offset, eof=True)
                return
            if now - started >= FOLLOW_MAX:
                return
            await asyncio.sleep(pause)
            pause = min(FOLLOW_IDLE_POLL, pause * 1.5)

    @rpc
    async def GetOverview(
        self, request: jobs_pb2.OverviewRequest, context: Any
    ) -> jobs_pb2.Overview:
        window = codec.overview_window_from_proto(request.window)
        return codec.overview_to_proto(await self.api.overview(owner_of(context), window))

    @rpc
    async def ListDeadLetters(
        self, request: jobs_pb2.ListDeadLettersRequest, context: Any
    ) -> jobs_pb2.ListRunsResponse:
        page = await self.api.list_dead_letters(
            owner_of(context),
            job_id=request.job_id,
            page_size=page_size(request.page_size),
            page_token=page_token(request.page_token),
        )
        runs, token = fitted(PageKind.DEAD_LETTERS, page, codec.run_to_proto)
        return jobs_pb2.ListRunsResponse(runs=runs, next_page_token=token)

    @rpc
    async def ListDeliveries(
        self, request: jobs_pb2.ListDeliveriesRequest, context: Any
    ) -> jobs_pb2.ListDeliveriesResponse:
        page = await self.api.notify.list_deliveries(
            owner_of(context),
            job_id=request.job_id,
            page_size=page_size(request.page_size),
            page_token=page_token(request.page_token),
        )
        found, token = fitted(PageKind.DELIVERIES, page, delivery_to_proto)
        return jobs_pb2.ListDeliveriesResponse(deliveries=found, next_page_token=token)

    @rpc
    async def GetNotifySettings(
        self, request: jobs_pb2.GetNotifySettingsRequest, context: Any
    ) -> jobs_pb2.NotifySettings:
        return notify_settings_to_proto(await self.api.notify.get(owner_of(context)))

    @rpc
    async def SetNotifyDefaults(
        self, request: jobs_pb2.SetNotifyDefaultsRequest, context: Any
    ) -> jobs_pb2.NotifySettings:
        defaults = (
            notify_from_proto(request.defaults, "defaults")
            if request.HasField("defaults")
            else None
        )
        settings = self.api.notify
        return notify_settings_to_proto(await settings.set_defaults(owner_of(context), defaults))

    @rpc
    async def SetNotifySecret(
        self, request: jobs_pb2.SetNotifySecretRequest, context: Any
    ) -> jobs_pb2.NotifySettings:
        settings = self.api.notify
        return notify_settings_to_proto(
            await settings.set_secret(owner_of(context), request.secret)
        )

    @rpc
    async def ReplayDeadLetters(
        self, request: jobs_pb2.DeadLettersRequest, context: Any
    ) -> jobs_pb2.ListRunsResponse:
        runs = await self.api.replay_dead_letters(
            owner_of(context), list(request.run_ids), request.job_id
        )
        return jobs_pb2.ListRunsResponse(runs=[codec.run_to_proto(r) for r in runs])

    @rpc
    async def DropDeadLetters(
        self, request: jobs_pb2.DeadLettersRequest, context: Any
    ) -> jobs_pb2.DropDeadLettersResponse:
        n = await self.api.drop_dead_letters(
            owner_of(context), list(request.run_ids), request.job_id
        )
        return jobs_pb2.DropDeadLettersResponse(dropped=n)

    @rpc
    async def UploadArtifact(
        self, requests: AsyncIterator[jobs_pb2.UploadArtifactRequest], context: Any
    ) -> jobs_pb2.UploadArtifactResponse:
        """A job's code archive: the first message says its size (and digest), the
        bytes follow; stored once checked (``coordinator/artifacts.py``). Audited here,
        for either edge: the audit interceptor sees unary calls only."""
        owner = owner_of(context)
        outcome, reason = "OK", ""
        try:
            return await self._upload(owner, requests)
        except BaseException as e:
            outcome = codec.status_for(e)[0].name if isinstance(e, ShardcronError) else "INTERNAL"
            reason = getattr(e, "message", "")
            raise
        finally:
            log_write(
                principal=principal_of(),
                owner=owner,
                method="UploadArtifact",
                messages=(),
                outcome=outcome,
                reason=reason,
            )

    async def _upload(
        self, owner: str, requests: AsyncIterator[jobs_pb2.UploadArtifactRequest]
    ) -> jobs_pb2.UploadArtifactResponse:
        first = await anext(aiter(requests), None)  # bad bytes: INVALID_ARGUMENT first
        if first is None:
            raise InvalidArgument("size", "required: the first message says the size")
        artifacts = self.api.artifacts
        if artifacts is None:
            raise FailedPrecondition("this node keeps no blob store: no artifacts")

        async def chunks() -> AsyncIterator[bytes]:
            if first.data:
                yield first.data
            async for request in requests:
                if request.size or request.sha256:
                    raise InvalidArgument("size", "only the first message says size and sha256")
                yield request.data

        uploaded = await artifacts.upload(owner, first.size, first.sha256, chunks())
        return jobs_pb2.UploadArtifactResponse(
            sha256=uploaded.sha256, size=uploaded.size, stored=uploaded.stored
        )


class ClusterServiceServicer(cluster_pb2_grpc.ClusterServiceServicer):
    def __init__(self, coordination: Coordination, router: ShardRouter | None) -> None:
        self.coordination = coordination
        self.router = router

    @rpc
    async def GetStatus(
        self, request: cluster_pb2.GetStatusRequest, context: Any
    ) -> cluster_pb2.ClusterStatus:
        view = await self.coordination.view()
        viewer = viewer_of(current_caller())  # whose workers it lists: status_workers
        statuses = await self.router.poller_statuses(viewer) if self.router else []
        lag = {s.shard: codec.shard_info_from_proto(s) for st in statuses for s in st.shards}
        shards = [
            lag.get(s) or ShardInfo(shard=s, owner=o) for s, o in sorted(view.shard_owners.items())
        ]
        workers, omitted = listed(
            merge_workers(codec.worker_info_from_proto(w) for st in statuses for w in st.workers),
            viewer,
            omitted=sum(st.workers_omitted for st in statuses),
        )
        status = ClusterStatus(
            mode=view.mode,
            leader=view.leader,
            epoch=view.epoch,
            members=view.members,
            shards=shards,
            workers=workers,
            workers_omitted=omitted,
        )
        return codec.cluster_status_to_proto(status)


def build_server(
    listen: str,
    *,
    api: JobsApi | None,
    poller: Poller | None,
    coordination: Coordination,
    router: ShardRouter | None,
    credentials: grpc.ServerCredentials | None = None,
    metrics: Metrics | None = None,
    auth: AuthSource | None = None,
    open_calls: OpenCalls | None = None,
    output_blobs: OutputBlobs | None = None,
    artifacts: Artifacts | None = None,
    result_blobs: ResultBlobs | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A gRPC server with the services of the roles given, TLS when ``credentials`` are
    given (every service on the one port); returns it (not started) and its port.
    Its ``health`` (``ServiceHealth``) says NOT_SERVING until ``health.serving()``.
    With ``auth`` every call is judged against its principals before anything else
    but the metrics sees it. ``open_calls`` counts the long calls each principal holds
    open (follows, WaitRuns, worker streams) against their limits."""
    open_calls = open_calls or OpenCalls()
    # Outermost first: metrics count every call, refused ones too; auth refuses before
    # anything reads the request, and sets the caller that audit, the request size
    # quota (the owner) and the servicers read; decoding is innermost.
    server = grpc.aio.server(
        interceptors=[
            *([MetricsInterceptor(metrics)] if metrics is not None else []),
            *([AuthInterceptor(auth)] if auth is not None else []),
            AuditInterceptor(owner_of=owner_of, principal_of=principal_of),
            *([RequestSizeInterceptor(api.quotas, owner_of=owner_of)] if api else []),
            DecodingInterceptor(),
        ],
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            ("grpc.so_reuseport", 0),  # a second node on a busy port must fail, not share it
        ],
    )
    names = [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME]
    if api is not None:
        jobs_pb2_grpc.add_JobServiceServicer_to_server(JobServiceServicer(api, open_calls), server)
        names.append(jobs_pb2.DESCRIPTOR.services_by_name["JobService"].full_name)
    if poller is not None:
        worker_pb2_grpc.add_WorkerServiceServicer_to_server(
            WorkerStreamServicer(
                poller.submit,
                poller.may_lease,
                silence_timeout=poller.config.worker_silence_timeout,
                auth=auth,
                open_calls=open_calls,
                output=None if output_blobs is None else (output_blobs, poller.output_owner),
                artifacts=None if artifacts is None else (artifacts, poller.artifact_of),
                results=None if result_blobs is None else (result_blobs, poller.results_owner),
            ),
            server,
        )
        cluster_pb2_grpc.add_PollerServiceServicer_to_server(PollerServiceServicer(poller), server)
        names.append(cluster_pb2.DESCRIPTOR.services_by_name["PollerService"].full_name)
        names.append(worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name)
    cluster_pb2_grpc.add_ClusterServiceServicer_to_server(
        ClusterServiceServicer(coordination, router), server
    )
    names.append(cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name)
    health_servicer = ServiceHealth(n for n in names if n.startswith("shardcron."))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(names, server)
    if credentials is not None:
        port = server.add_secure_port(listen, credentials)
    else:
        port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    server.health = health_servicer  # type: ignore[attr-defined]
    return server, port

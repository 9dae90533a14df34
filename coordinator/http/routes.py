"""The HTTP routes: one table, each entry an operation on the servicers of
``coordinator/service.py``, and the handlers of the routes that add to what one call
answers. The OpenAPI document (``openapi``) and the aiohttp router (``server``) are
both built from ``ROUTES``, so what is served is what is documented.

Every route is called as the caller ``caller.resolve_owner`` finds in its headers,
through the servicers themselves (in-process), so a route checks, changes and answers
exactly what the gRPC method does; errors are answered by ``errors.error_response``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from aiohttp import web
from google.protobuf.message import Message

from shardcron.client.errors import InvalidArgument
from shardcron.coordinator.artifacts import CHUNK as ARTIFACT_CHUNK
from shardcron.coordinator.http.mapping import to_json
from shardcron.coordinator.http.output import OUTPUT_SCHEMA, read_output, read_result
from shardcron.coordinator.http.services import Handler, Services
from shardcron.v1 import cluster_pb2, jobs_pb2, types_pb2

# Of a new job's runs, these are fires it passed over, not its first run.
_PASSED_OVER = frozenset({types_pb2.RUN_STATE_SKIPPED, types_pb2.RUN_STATE_MISSED})
# How many of a job's newest runs its status looks through for its latest and next run.
STATUS_RUNS = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """One operation. ``request`` is the proto the call is built from (body, path and
    query, see ``mapping``); ``response`` documents a plain answer, ``schema`` one the
    handler composes (an OpenAPI schema object)."""

    method: str
    path: str
    operation: str
    summary: str
    rpc: str  # the method the route serves: how it is authorized and audited
    handler: Handler | None = None  # None: the JSON of what ``rpc`` answers
    request: type[Message] | None = None
    response: type[Message] | None = None
    schema: Mapping[str, Any] | None = None
    body: bool = False
    body_required: bool = False
    query: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    extra_query: Mapping[str, str] = field(default_factory=dict)  # name -> meaning
    status: int = 200
    content: str = "application/json"
    octets: bool = False  # its body is bytes (application/octet-stream), read by its handler

    def __post_init__(self) -> None:
        if self.handler is None:
            object.__setattr__(self, "handler", unary(self.rpc, self.status))

    async def serve(
        self, services: Services, request: web.Request, message: Any
    ) -> web.StreamResponse:
        assert self.handler is not None
        return await self.handler(services, request, message)


def unary(rpc: str, status: int = 200) -> Handler:
    """A handler answering the JSON of what ``rpc`` answers."""

    async def handle(services: Services, request: web.Request, message: Any) -> web.Response:
        return web.json_response(to_json(await services.call(rpc, message, request)), status=status)

    return handle


async def upload_artifact(
    services: Services, request: web.Request, message: jobs_pb2.UploadArtifactRequest
) -> web.Response:
    """``UploadArtifact`` with the body's bytes, streamed as they arrive: its size is
    the ``Content-Length`` (required), its sha256 the optional query parameter."""
    size = request.content_length
    if size is None:
        raise InvalidArgument("content-length", "required: the archive's size in bytes")

    async def requests() -> AsyncIterator[jobs_pb2.UploadArtifactRequest]:
        yield jobs_pb2.UploadArtifactRequest(size=size, sha256=message.sha256)
        while chunk := await request.content.read(ARTIFACT_CHUNK):
            yield jobs_pb2.UploadArtifactRequest(data=chunk)

    answer = await services.call("UploadArtifact", requests(), request)  # type: ignore[arg-type]
    return web.json_response(to_json(answer), status=201 if answer.stored else 200)


async def create_job(
    services: Services, request: web.Request, message: jobs_pb2.CreateJobRequest
) -> web.Response:
    """202 with the job's ``Location`` and, beside ``CreateJob``'s answer, its first
    run's id (``firstRunId``), so a client can follow that run at once."""
    reply = await services.call("CreateJob", message, request)
    body = to_json(reply)
    runs = await services.call("ListRuns", jobs_pb2.ListRunsRequest(job_id=reply.job.id), request)
    first = [r for r in runs.runs if r.state not in _PASSED_OVER] or list(runs.runs)
    if first:
        body["firstRunId"] = first[-1].id  # runs come newest first
    return web.json_response(body, status=202, headers={"Location": f"/v1/jobs/{reply.job.id}"})


async def job_status(
    services: Services, request: web.Request, message: jobs_pb2.GetJobRequest
) -> web.Response:
    """The job, its latest run (the newest already due) and its next (one due later)."""
    job = await services.call("GetJob", message, request)
    listing = jobs_pb2.ListRunsRequest(job_id=job.id, page_size=STATUS_RUNS)
    runs = (await services.call("ListRuns", listing, request)).runs
    now = datetime.now(UTC)
    due = [r for r in runs if r.due_at.ToDatetime(UTC) <= now]
    later = [r for r in runs if r.due_at.ToDatetime(UTC) > now]
    body: dict[str, Any] = {"job": to_json(job)}
    if due:
        body["latestRun"] = to_json(due[0])
    if later:
        body["nextRun"] = to_json(later[-1])
    return web.json_response(body)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


PAGE = ("pageSize", "pageToken")
STATE = MappingProxyType({"state": "states"})


def _routes() -> tuple[Route, ...]:
    job_ref = jobs_pb2.JobRef
    return (
        Route(
            method="POST", path="/v1/jobs", operation="createJob", rpc="CreateJob", handler=create_job,
            summary="Create a job; answers once it and its first run are durably written",
            request=jobs_pb2.CreateJobRequest, body=True, body_required=True, status=202,
            schema={"allOf": [_ref("shardcron.v1.CreateJobResponse"), {
                "type": "object", "properties": {"firstRunId": {"type": "string"}}}]},
        ),
        Route(
            method="GET", path="/v1/jobs", operation="listJobs", rpc="ListJobs",
            summary="The owner's jobs, in id order (all but DELETED unless a state is given)",
            request=jobs_pb2.ListJobsRequest, response=jobs_pb2.ListJobsResponse,
            query=(*PAGE, "state", "namePrefix", "withHealth"), aliases=STATE,
        ),
        Route(
            method="GET", path="/v1/jobs/{jobId}", operation="getJob", rpc="GetJob",
            summary="A job", request=jobs_pb2.GetJobRequest, response=types_pb2.Job,
        ),
        Route(
            method="PUT", path="/v1/jobs/{jobId}", operation="updateJob",
            rpc="UpdateJob", summary="Replace a job's spec (expectedVersion required)",
            request=jobs_pb2.UpdateJobRequest, response=types_pb2.Job, body=True,
            body_required=True,
        ),
        Route(
            method="DELETE", path="/v1/jobs/{jobId}", operation="deleteJob",
            rpc="DeleteJob", summary="Delete a job",
            request=jobs_pb2.DeleteJobRequest, response=types_pb2.Job,
            query=("expectedVersion", "cancelRunning"),
        ),
        *(
            Route(
                method="POST", path=f"/v1/jobs/{{jobId}}/{verb}", operation=f"{verb}Job",
                rpc=rpc, summary=summary, request=job_ref, response=reply, body=True,
                query=("expectedVersion",),
            )
            for verb, rpc, reply, summary in (
                ("pause", "PauseJob", types_pb2.Job, "Pause an ACTIVE job"),
                ("resume", "ResumeJob", types_pb2.Job, "Resume a PAUSED job"),
                ("runNow", "RunJobNow", types_pb2.Run, "Run a job now, beside its schedule"),
            )
        ),
        Route(
            method="GET", path="/v1/jobs/{jobId}/status", operation="getJobStatus",
            rpc="GetJob", handler=job_status, summary="A job, its latest due run and its next run",
            request=jobs_pb2.GetJobRequest,
            schema={"type": "object", "required": ["job"], "properties": {
                "job": _ref("shardcron.v1.Job"), "latestRun": _ref("shardcron.v1.Run"),
                "nextRun": _ref("shardcron.v1.Run")}},
        ),
        Route(
            method="GET", path="/v1/jobs/{jobId}/runs", operation="listJobRuns",
            rpc="ListRuns", summary="A job's runs, newest first",
            request=jobs_pb2.ListRunsRequest, response=jobs_pb2.ListRunsResponse,
            query=(*PAGE, "state"), aliases=STATE,
        ),
        Route(
            method="GET", path="/v1/runs", operation="listRuns", rpc="ListRuns",
            summary="Runs across the owner's jobs (e.g. state=RUNNING), by job then newest;"
            " a page may be short while nextPageToken is set",
            request=jobs_pb2.ListRunsRequest, response=jobs_pb2.ListRunsResponse,
            query=(*PAGE, "state", "jobId"), aliases=STATE,
        ),
        Route(
            method="GET", path="/v1/runs/{runId}", operation="getRun", rpc="GetRun",
            summary="A run", request=jobs_pb2.GetRunRequest, response=types_pb2.Run,
        ),
        Route(
            method="POST", path="/v1/runs/{runId}/cancel", operation="cancelRun",
            rpc="CancelRun", summary="Cancel a run that is not final",
            request=jobs_pb2.GetRunRequest, response=types_pb2.Run,
        ),
        Route(
            method="GET", path="/v1/runs/{runId}/output", operation="readRunOutput",
            rpc="ReadRunOutput", handler=read_output, summary="A run's kept output; follow=true streams it",
            request=jobs_pb2.ReadRunOutputRequest, query=("offset", "follow", "limit"),
            extra_query={"format": "text: the bytes as text/plain instead of JSON or SSE"},
            schema=OUTPUT_SCHEMA,
        ),
        Route(
            method="GET", path="/v1/runs/{runId}/results/{name}", operation="readRunResult",
            rpc="ReadRunResult", handler=read_result,
            summary="One of a run's result files (Run.results names them), as a download",
            request=jobs_pb2.ReadRunResultRequest, query=("offset", "limit"),
            content="application/octet-stream", schema={"type": "string", "format": "binary"},
        ),
        Route(
            method="GET", path="/v1/deadLetters", operation="listDeadLetters",
            rpc="ListDeadLetters", summary="Runs that failed with no attempt left",
            request=jobs_pb2.ListDeadLettersRequest, response=jobs_pb2.ListRunsResponse,
            query=(*PAGE, "jobId"),
        ),
        Route(
            method="GET", path="/v1/overview", operation="getOverview", rpc="GetOverview",
            summary="The owner's runs at a glance (kept in each poller's memory since it started)",
            request=jobs_pb2.OverviewRequest, response=jobs_pb2.Overview, query=("window",),
        ),
        Route(
            method="GET", path="/v1/deliveries", operation="listDeliveries",
            rpc="ListDeliveries", summary="Webhook deliveries of notifications, newest first",
            request=jobs_pb2.ListDeliveriesRequest, response=jobs_pb2.ListDeliveriesResponse,
            query=(*PAGE, "jobId"),
        ),
        Route(
            method="GET", path="/v1/notifySettings", operation="getNotifySettings",
            rpc="GetNotifySettings", summary="The owner's default notification rules; whether a secret is set",
            request=jobs_pb2.GetNotifySettingsRequest, response=jobs_pb2.NotifySettings,
        ),
        Route(
            method="PUT", path="/v1/notifySettings/defaults", operation="setNotifyDefaults",
            rpc="SetNotifyDefaults", summary="The rules of the owner's jobs that have none of their own",
            request=jobs_pb2.SetNotifyDefaultsRequest, response=jobs_pb2.NotifySettings, body=True,
        ),
        Route(
            method="PUT", path="/v1/notifySettings/secret", operation="setNotifySecret",
            rpc="SetNotifySecret", summary="The secret the owner's deliveries are signed with (write-only)",
            request=jobs_pb2.SetNotifySecretRequest, response=jobs_pb2.NotifySettings, body=True,
            body_required=True,
        ),
        Route(
            method="POST", path="/v1/deadLetters/replay", operation="replayDeadLetters",
            rpc="ReplayDeadLetters", summary="Run dead letters again, as new runs",
            request=jobs_pb2.DeadLettersRequest, response=jobs_pb2.ListRunsResponse, body=True,
            body_required=True,
        ),
        Route(
            method="POST", path="/v1/deadLetters/drop", operation="dropDeadLetters",
            rpc="DropDeadLetters", summary="Clear dead letters without running them",
            request=jobs_pb2.DeadLettersRequest, response=jobs_pb2.DropDeadLettersResponse,
            body=True, body_required=True,
        ),
        Route(
            method="POST", path="/v1/artifacts", operation="uploadArtifact",
            rpc="UploadArtifact",
            summary="Store a job's code archive (tar, tar.gz) sent as the body, by its sha256",
            handler=upload_artifact, request=jobs_pb2.UploadArtifactRequest,
            response=jobs_pb2.UploadArtifactResponse, query=("sha256",), octets=True,
        ),
        Route(
            method="GET", path="/v1/cluster", operation="getCluster", rpc="GetStatus",
            summary="Leader, epoch, members, shards with their lag, workers with their slots",
            request=cluster_pb2.GetStatusRequest, response=cluster_pb2.ClusterStatus,
        ),
        Route(
            method="POST", path="/v1/preview", operation="previewFires",
            rpc="PreviewFires", summary="The next fires of a schedule or a job",
            request=jobs_pb2.PreviewFiresRequest, response=jobs_pb2.PreviewFiresResponse,
            body=True, body_required=True,
        ),
    )  # fmt: skip


ROUTES: tuple[Route, ...] = _routes()

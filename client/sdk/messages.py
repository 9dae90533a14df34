"""The requests both clients send and the replies they read, as plain functions.

Each ``*_request`` function builds one protobuf request from the arguments of a client
method; each reader turns one reply into the domain values the method returns (the
field paths in its errors name the item, ``jobs[3]``). ``Client`` and ``AsyncClient``
share them, so the two differ only in how they call. A value protobuf cannot hold (an
integer past its field's range, text that is not Unicode) raises ``InvalidArgument``
naming the field before anything is sent.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import BinaryIO

from shardcron.client.codec import (
    fire_from_proto,
    job_from_proto,
    job_spec_to_proto,
    job_state_to_proto,
    run_from_proto,
    run_state_to_proto,
    schedule_to_proto,
)
from shardcron.client.codec.common import build, set_duration, set_time
from shardcron.client.codec.notify import delivery_from_proto, notify_to_proto
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import (
    Delivery,
    Fire,
    Job,
    JobSpec,
    JobState,
    NotifyPolicy,
    Page,
    Run,
    RunState,
    Schedule,
)
from shardcron.v1 import cluster_pb2, jobs_pb2, types_pb2

# A spec to create, alone or with its idempotency key.
JobSpecArg = JobSpec | tuple[JobSpec, str]


def create_job_request(
    spec: JobSpec,
    idempotency_key: str,
    field: str = "",
    encoded: dict[int, types_pb2.JobSpec] | None = None,
) -> jobs_pb2.CreateJobRequest:
    """``encoded``: specs already encoded in this batch, by ``id()`` (a batch made from
    one spec encodes it once; each request copies the message)."""
    prefix = f"{field}." if field else ""
    message = None if encoded is None else encoded.get(id(spec))
    if message is None:
        message = job_spec_to_proto(spec, f"{prefix}spec")
        if encoded is not None:
            encoded[id(spec)] = message
    return build(jobs_pb2.CreateJobRequest, field, spec=message, idempotency_key=idempotency_key)


def created_job(resp: jobs_pb2.CreateJobResponse) -> tuple[Job, bool]:
    return job_from_proto(resp.job), resp.created


def create_jobs_request(
    specs: Sequence[JobSpecArg], *, ids_only: bool = False
) -> jobs_pb2.CreateJobsRequest:
    items = [(s, "") if isinstance(s, JobSpec) else s for s in specs]
    encoded: dict[int, types_pb2.JobSpec] = {}  # every spec stays referenced by items
    return jobs_pb2.CreateJobsRequest(
        jobs=[
            create_job_request(s, key, f"jobs[{i}]", encoded) for i, (s, key) in enumerate(items)
        ],
        ids_only=ids_only,
    )


def created_jobs(resp: jobs_pb2.CreateJobsResponse) -> list[Job]:
    return [job_from_proto(r.job, f"jobs[{i}].job") for i, r in enumerate(resp.jobs)]


def created_job_ids(resp: jobs_pb2.CreateJobsResponse) -> list[str]:
    return [r.job.id for r in resp.jobs]


def get_job_request(job_id: str) -> jobs_pb2.GetJobRequest:
    return build(jobs_pb2.GetJobRequest, "", job_id=job_id)


def list_jobs_request(
    states: Iterable[JobState],
    name_prefix: str,
    labels: Mapping[str, str] | None,
    page_size: int,
    page_token: str,
    with_health: bool = False,
) -> jobs_pb2.ListJobsRequest:
    return build(
        jobs_pb2.ListJobsRequest,
        "",
        states=[job_state_to_proto(s) for s in states],
        name_prefix=name_prefix,
        labels=dict(labels or {}),
        page_size=page_size,
        page_token=page_token,
        with_health=with_health,
    )


def jobs_page(resp: jobs_pb2.ListJobsResponse) -> Page[Job]:
    jobs = [job_from_proto(j, f"jobs[{i}]") for i, j in enumerate(resp.jobs)]
    return Page(items=jobs, next_page_token=resp.next_page_token)


def update_job_request(
    job_id: str, spec: JobSpec, expected_version: int
) -> jobs_pb2.UpdateJobRequest:
    return build(
        jobs_pb2.UpdateJobRequest,
        "",
        job_id=job_id,
        spec=job_spec_to_proto(spec),
        expected_version=expected_version,
    )


def job_ref(job_id: str, expected_version: int) -> jobs_pb2.JobRef:
    return build(jobs_pb2.JobRef, "", job_id=job_id, expected_version=expected_version)


def delete_job_request(
    job_id: str, cancel_running: bool, expected_version: int
) -> jobs_pb2.DeleteJobRequest:
    return build(
        jobs_pb2.DeleteJobRequest,
        "",
        job_id=job_id,
        cancel_running=cancel_running,
        expected_version=expected_version,
    )


def preview_fires_request(
    source: Schedule | str, count: int, after: datetime | None
) -> jobs_pb2.PreviewFiresRequest:
    if isinstance(source, Schedule):
        req = build(
            jobs_pb2.PreviewFiresRequest, "", schedule=schedule_to_proto(source), count=count
        )
    else:
        req = build(jobs_pb2.PreviewFiresRequest, "", job_id=source, count=count)
    set_time(req, "after", after)
    return req


def fires(resp: jobs_pb2.PreviewFiresResponse) -> list[Fire]:
    return [fire_from_proto(f, f"fires[{i}]") for i, f in enumerate(resp.fires)]


def list_runs_request(
    job_id: str, states: Iterable[RunState], page_size: int, page_token: str
) -> jobs_pb2.ListRunsRequest:
    return build(
        jobs_pb2.ListRunsRequest,
        "",
        job_id=job_id,
        states=sorted(run_state_to_proto(s) for s in states),
        page_size=page_size,
        page_token=page_token,
    )


def runs_page(resp: jobs_pb2.ListRunsResponse) -> Page[Run]:
    items = [run_from_proto(r, f"runs[{i}]") for i, r in enumerate(resp.runs)]
    return Page(items=items, next_page_token=resp.next_page_token)


def runs(resp: jobs_pb2.ListRunsResponse) -> list[Run]:
    return runs_page(resp).items


def run_request(run_id: str) -> jobs_pb2.GetRunRequest:
    return build(jobs_pb2.GetRunRequest, "", run_id=run_id)


def wait_run_request(run_id: str, seconds: float) -> jobs_pb2.WaitRunRequest:
    """WaitRun for at most ``seconds`` (above 0: the server reads 0 as its default)."""
    msg = build(jobs_pb2.WaitRunRequest, "", run_id=run_id)
    set_duration(msg, "timeout", timedelta(seconds=max(seconds, 0.001)))
    return msg


def read_output_request(
    run_id: str, offset: int, follow: bool, limit: int = 0
) -> jobs_pb2.ReadRunOutputRequest:
    return build(
        jobs_pb2.ReadRunOutputRequest, "", run_id=run_id, offset=offset, follow=follow, limit=limit
    )


def read_result_request(
    run_id: str, name: str, offset: int, limit: int
) -> jobs_pb2.ReadRunResultRequest:
    return build(
        jobs_pb2.ReadRunResultRequest, "", run_id=run_id, name=name, offset=offset, limit=limit
    )


def list_deliveries_request(
    job_id: str, page_size: int, page_token: str
) -> jobs_pb2.ListDeliveriesRequest:
    return build(
        jobs_pb2.ListDeliveriesRequest,
        "",
        job_id=job_id,
        page_size=page_size,
        page_token=page_token,
    )


def notify_defaults_request(defaults: NotifyPolicy | None) -> jobs_pb2.SetNotifyDefaultsRequest:
    req = jobs_pb2.SetNotifyDefaultsRequest()
    if defaults is not None:
        req.defaults.CopyFrom(notify_to_proto(defaults, "defaults"))
    return req


def deliveries_page(resp: jobs_pb2.ListDeliveriesResponse) -> Page[Delivery]:
    items = [delivery_from_proto(d, f"deliveries[{i}]") for i, d in enumerate(resp.deliveries)]
    return Page(items=items, next_page_token=resp.next_page_token)


def list_dead_letters_request(
    job_id: str, page_size: int, page_token: str
) -> jobs_pb2.ListDeadLettersRequest:
    return build(
        jobs_pb2.ListDeadLettersRequest,
        "",
        job_id=job_id,
        page_size=page_size,
        page_token=page_token,
    )


def dead_letters_request(run_ids: Iterable[str], job_id: str) -> jobs_pb2.DeadLettersRequest:
    run_ids = list(run_ids)
    if not run_ids and not job_id:
        # Refused here so that no server can read "nothing named" as "everything".
        raise InvalidArgument("run_ids", "name the dead letters: run ids or a job id")
    return build(jobs_pb2.DeadLettersRequest, "", run_ids=run_ids, job_id=job_id)


def dropped(resp: jobs_pb2.DropDeadLettersResponse) -> int:
    return resp.dropped


def cluster_status_request() -> cluster_pb2.GetStatusRequest:
    return cluster_pb2.GetStatusRequest()


ARTIFACT_CHUNK = 1 << 20  # the bytes of one UploadArtifact message, at most
ArtifactSource = str | os.PathLike[str] | bytes


def upload_artifact_requests(source: ArtifactSource) -> Iterator[jobs_pb2.UploadArtifactRequest]:
    """An archive (a file's path, or its bytes) as ``UploadArtifact``'s messages: its
    size and sha256 first (the node checks the bytes against them), then its bytes. A
    file is opened and hashed here (an error reading it raises here, before any call)
    and read again, a piece at a time, as the messages are sent."""
    if isinstance(source, bytes):
        digest = hashlib.sha256(source).hexdigest()
        first = jobs_pb2.UploadArtifactRequest(size=len(source), sha256=digest)
        pieces = (source[i : i + ARTIFACT_CHUNK] for i in range(0, len(source), ARTIFACT_CHUNK))
        return itertools.chain([first], (jobs_pb2.UploadArtifactRequest(data=p) for p in pieces))
    f = open(source, "rb")  # noqa: SIM115 (closed by the generator below)
    try:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        size = f.tell()
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return _file_requests(f, size, digest)


def _file_requests(f: BinaryIO, size: int, digest: str) -> Iterator[jobs_pb2.UploadArtifactRequest]:
    with f:
        yield jobs_pb2.UploadArtifactRequest(size=size, sha256=digest)
        while chunk := f.read(ARTIFACT_CHUNK):
            yield jobs_pb2.UploadArtifactRequest(data=chunk)


def uploaded_artifact(resp: jobs_pb2.UploadArtifactResponse) -> str:
    return resp.sha256

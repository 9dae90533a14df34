"""The typed Python SDK: ``Client`` (blocking) and ``AsyncClient`` (asyncio) for JobService
and ClusterService.

Both classes take and return the domain types of ``shardcron.client.types``; protobuf
stays inside this module and ``codec``. Every failed call raises a
``shardcron.client.errors.ShardcronError`` (``.code`` is the gRPC status name) made by
``codec.error_from_rpc``. Requests are built and responses decoded by the module-level
functions below, shared by both classes, so the classes only choose how to call.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import grpc
import grpc.aio

from shardcron.client.codec import (
    cluster_status_from_proto,
    error_from_rpc,
    fire_from_proto,
    job_from_proto,
    job_spec_to_proto,
    job_state_to_proto,
    output_chunk_from_proto,
    run_from_proto,
    run_state_to_proto,
    schedule_to_proto,
)
from shardcron.client.errors import InvalidArgument
from shardcron.client.types import (
    DEFAULT_OWNER,
    FINAL_RUN_STATES,
    ClusterStatus,
    Fire,
    Job,
    JobSpec,
    JobState,
    OutputChunk,
    Page,
    Run,
    RunState,
    Schedule,
)
from shardcron.v1 import cluster_pb2, cluster_pb2_grpc, jobs_pb2, jobs_pb2_grpc

DEFAULT_TARGET = "127.0.0.1:7400"
TARGET_ENV = "SHARDCRON_TARGET"
OWNER_METADATA_KEY = "x-shardcron-owner"
DEFAULT_POLL_INTERVAL = 0.5  # seconds between polls of wait_run / wait_job_runs, at most

JobSpecArg = JobSpec | tuple[JobSpec, str]

# --------------------------------------------------------------------------- requests and responses


def _create_job_request(spec: JobSpec, idempotency_key: str) -> jobs_pb2.CreateJobRequest:
    return jobs_pb2.CreateJobRequest(spec=job_spec_to_proto(spec), idempotency_key=idempotency_key)


def _created_job(resp: jobs_pb2.CreateJobResponse) -> tuple[Job, bool]:
    return job_from_proto(resp.job), resp.created


def _create_jobs_request(specs: Sequence[JobSpecArg]) -> jobs_pb2.CreateJobsRequest:
    items = [(s, "") if isinstance(s, JobSpec) else s for s in specs]
    return jobs_pb2.CreateJobsRequest(jobs=[_create_job_request(s, key) for s, key in items])


def _created_jobs(resp: jobs_pb2.CreateJobsResponse) -> list[Job]:
    return [job_from_proto(r.job, f"jobs[{i}].job") for i, r in enumerate(resp.jobs)]


def _get_job_request(job_id: str) -> jobs_pb2.GetJobRequest:
    return jobs_pb2.GetJobRequest(job_id=job_id)


def _list_jobs_request(
    states: Iterable[JobState],
    name_prefix: str,
    labels: Mapping[str, str] | None,
    page_size: int,
    page_token: str,
) -> jobs_pb2.ListJobsRequest:
    return jobs_pb2.ListJobsRequest(
        states=[job_state_to_proto(s) for s in states],
        name_prefix=name_prefix,
        labels=dict(labels or {}),
        page_size=page_size,
        page_token=page_token,
    )


def _jobs_page(resp: jobs_pb2.ListJobsResponse) -> Page[Job]:
    jobs = [job_from_proto(j, f"jobs[{i}]") for i, j in enumerate(resp.jobs)]
    return Page(items=jobs, next_page_token=resp.next_page_token)


def _update_job_request(
    job_id: str, spec: JobSpec, expected_version: int
) -> jobs_pb2.UpdateJobRequest:
    return jobs_pb2.UpdateJobRequest(
        job_id=job_id, spec=job_spec_to_proto(spec), expected_version=expected_version
    )


def _job_ref(job_id: str, expected_version: int) -> jobs_pb2.JobRef:
    return jobs_pb2.JobRef(job_id=job_id, expected_version=expected_version)


def _delete_job_request(
    job_id: str, cancel_running: bool, expected_version: int
) -> jobs_pb2.DeleteJobRequest:
    return jobs_pb2.DeleteJobRequest(
        job_id=job_id, cancel_running=cancel_running, expected_version=expected_version
    )


def _preview_fires_request(
    source: Schedule | str, count: int, after: datetime | None
) -> jobs_pb2.PreviewFiresRequest:
    req = jobs_pb2.PreviewFiresRequest(count=count)
    if isinstance(source, Schedule):
        req.schedule.CopyFrom(schedule_to_proto(source))
    else:
        req.job_id = source
    if after is not None:
        req.after.FromDatetime(after)
    return req


def _fires(resp: jobs_pb2.PreviewFiresResponse) -> list[Fire]:
    return [fire_from_proto(f, f"fires[{i}]") for i, f in enumerate(resp.fires)]


def _list_runs_request(
    job_id: str, states: Iterable[RunState], page_size: int, page_token: str
) -> jobs_pb2.ListRunsRequest:
    return jobs_pb2.ListRunsRequest(
        job_id=job_id,
        states=sorted(run_state_to_proto(s) for s in states),
        page_size=page_size,
        page_token=page_token,
    )


def _runs_page(resp: jobs_pb2.ListRunsResponse) -> Page[Run]:
    runs = [run_from_proto(r, f"runs[{i}]") for i, r in enumerate(resp.runs)]
    return Page(items=runs, next_page_token=resp.next_page_token)


def _runs(resp: jobs_pb2.ListRunsResponse) -> list[Run]:
    return _runs_page(resp).items


def _run_request(run_id: str) -> jobs_pb2.GetRunRequest:
    return jobs_pb2.GetRunRequest(run_id=run_id)


def _read_output_request(run_id: str, offset: int, follow: bool) -> jobs_pb2.ReadRunOutputRequest:
    return jobs_pb2.ReadRunOutputRequest(run_id=run_id, offset=offset, follow=follow)


def _list_dead_letters_request(
    job_id: str, page_size: int, page_token: str
) -> jobs_pb2.ListDeadLettersRequest:
    return jobs_pb2.ListDeadLettersRequest(
        job_id=job_id, page_size=page_size, page_token=page_token
    )


def _dead_letters_request(run_ids: Iterable[str], job_id: str) -> jobs_pb2.DeadLettersRequest:
    run_ids = list(run_ids)
    if not run_ids and not job_id:
        # Refused here so that no server can read "nothing named" as "everything".
        raise InvalidArgument("run_ids", "name the dead letters: run ids or a job id")
    return jobs_pb2.DeadLettersRequest(run_ids=run_ids, job_id=job_id)


def _dropped(resp: jobs_pb2.DropDeadLettersResponse) -> int:
    return resp.dropped


def _resolve_target(target: str | None) -> str:
    return target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET


class _Waiter:
    """Poll pacing for the wait_* methods: short first delays growing to ``interval``,
    and TimeoutError once ``timeout`` seconds (None = never) have passed."""

    def __init__(self, timeout: float | None, interval: float) -> None:
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._interval = interval
        self._delay = min(0.05, interval)

    def next_delay(self, waiting_for: str) -> float:
        delay, self._delay = self._delay, min(self._delay * 2, self._interval)
        if self._deadline is None:
            return delay
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {self._timeout:g}s waiting for {waiting_for}")
        return min(delay, left)


def _final_runs_wanted(runs: list[Run], count: int, job_id: str) -> str:
    """What is still awaited, or an empty string once ``runs`` holds ``count`` runs."""
    return "" if len(runs) >= count else f"{count} final runs of job {job_id} (have {len(runs)})"


# --------------------------------------------------------------------------- blocking client


class Client:
    """Blocking client of a shardcron cluster (any api node).

    ``target`` defaults to ``$SHARDCRON_TARGET`` or ``127.0.0.1:7400``; every call is
    scoped to ``owner`` and given ``timeout`` seconds (except followed output).
    ``credentials`` switches to a TLS channel. Use as a context manager or ``close()``.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        owner: str = DEFAULT_OWNER,
        timeout: float = 30.0,
        channel_options: Sequence[tuple[str, Any]] = (),
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.target = _resolve_target(target)
        self.owner = owner
        self.timeout = timeout
        options = list(channel_options)
        self._channel = (
            grpc.secure_channel(self.target, credentials, options=options)
            if credentials is not None
            else grpc.insecure_channel(self.target, options=options)
        )
        self._metadata = ((OWNER_METADATA_KEY, owner),)
        self._jobs = jobs_pb2_grpc.JobServiceStub(self._channel)
        self._cluster = cluster_pb2_grpc.ClusterServiceStub(self._channel)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_from_rpc(e) from e

    # jobs

    def create_job(self, spec: JobSpec, *, idempotency_key: str = "") -> Job:
        """Create a job; returns once it and its first run are durably written.

        A retried create with the same ``idempotency_key`` returns the same job.
        """
        return self.create_job_ex(spec, idempotency_key=idempotency_key)[0]

    def create_job_ex(self, spec: JobSpec, *, idempotency_key: str = "") -> tuple[Job, bool]:
        """``create_job``, also saying whether the job was created (False: the key named an
        existing job, which is returned)."""
        return _created_job(
            self._call(self._jobs.CreateJob, _create_job_request(spec, idempotency_key))
        )

    def create_jobs(self, specs: Sequence[JobSpecArg]) -> list[Job]:
        """Create several jobs, all or none; a spec may be paired with its idempotency key.
        A bad one fails the batch with InvalidArgument naming ``jobs[i]``."""
        return _created_jobs(self._call(self._jobs.CreateJobs, _create_jobs_request(specs)))

    def get_job(self, job_id: str) -> Job:
        """Raises NotFound for an unknown id (or one of another owner)."""
        return job_from_proto(self._call(self._jobs.GetJob, _get_job_request(job_id)))

    def list_jobs(
        self,
        *,
        states: Iterable[JobState] = (),
        name_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Job]:
        """One page of the owner's jobs; no ``states`` = all but DELETED; every label given
        must match. Pass ``next_page_token`` back as ``page_token`` for the next page."""
        req = _list_jobs_request(states, name_prefix, labels, page_size, page_token)
        return _jobs_page(self._call(self._jobs.ListJobs, req))

    def iter_jobs(
        self,
        *,
        states: Iterable[JobState] = (),
        name_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Every job ``list_jobs`` would list, fetching pages as needed."""
        states, token = tuple(states), ""
        while True:
            page = self.list_jobs(
                states=states,
                name_prefix=name_prefix,
                labels=labels,
                page_size=page_size,
                page_token=token,
            )
            yield from page.items
            if not page.next_page_token:
                return
            token = page.next_page_token

    def update_job(self, job_id: str, spec: JobSpec, *, expected_version: int) -> Job:
        """Replace the job's spec. Raises VersionConflict when the job is no longer at
        ``expected_version``; a changed schedule recomputes the next fire."""
        req = _update_job_request(job_id, spec, expected_version)
        return job_from_proto(self._call(self._jobs.UpdateJob, req))

    def pause_job(self, job_id: str, *, expected_version: int = 0) -> Job:
        """No further fires run until resumed (they are recorded SKIPPED, PAUSED).
        ``expected_version`` 0 = any."""
        return job_from_proto(self._call(self._jobs.PauseJob, _job_ref(job_id, expected_version)))

    def resume_job(self, job_id: str, *, expected_version: int = 0) -> Job:
        return job_from_proto(self._call(self._jobs.ResumeJob, _job_ref(job_id, expected_version)))

    def run_job_now(self, job_id: str, *, expected_version: int = 0) -> Run:
        """Start one extra run now, outside the schedule."""
        return run_from_proto(self._call(self._jobs.RunJobNow, _job_ref(job_id, expected_version)))

    def delete_job(
        self, job_id: str, *, cancel_running: bool = False, expected_version: int = 0
    ) -> Job:
        """No further runs; with ``cancel_running`` leased and running ones are cancelled."""
        req = _delete_job_request(job_id, cancel_running, expected_version)
        return job_from_proto(self._call(self._jobs.DeleteJob, req))

    def preview_fires(
        self, schedule_or_job_id: Schedule | str, *, count: int = 10, after: datetime | None = None
    ) -> list[Fire]:
        """The next ``count`` fires after ``after`` (default now) of a schedule or of a job."""
        req = _preview_fires_request(schedule_or_job_id, count, after)
        return _fires(self._call(self._jobs.PreviewFires, req))

    # runs

    def list_runs(
        self,
        job_id: str,
        *,
        states: Iterable[RunState] = (),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        """One page of the job's runs, newest first; no ``states`` = all."""
        req = _list_runs_request(job_id, states, page_size, page_token)
        return _runs_page(self._call(self._jobs.ListRuns, req))

    def iter_runs(
        self, job_id: str, *, states: Iterable[RunState] = (), page_size: int = 100
    ) -> Iterator[Run]:
        """Every run ``list_runs`` would list, fetching pages as needed."""
        states, token = tuple(states), ""
        while True:
            page = self.list_runs(job_id, states=states, page_size=page_size, page_token=token)
            yield from page.items
            if not page.next_page_token:
                return
            token = page.next_page_token

    def get_run(self, run_id: str) -> Run:
        return run_from_proto(self._call(self._jobs.GetRun, _run_request(run_id)))

    def cancel_run(self, run_id: str) -> Run:
        """Cancel a pending or running run (the worker kills it); returns the run."""
        return run_from_proto(self._call(self._jobs.CancelRun, _run_request(run_id)))

    def read_output(
        self, run_id: str, *, offset: int = 0, follow: bool = False
    ) -> Iterator[OutputChunk]:
        """The run's kept output from byte ``offset`` (negative: from the end). With
        ``follow``, keeps streaming until the run is final (the last chunk has ``eof``)."""
        req = _read_output_request(run_id, offset, follow)
        call = self._jobs.ReadRunOutput(
            req, timeout=None if follow else self.timeout, metadata=self._metadata
        )
        try:
            for msg in call:
                yield output_chunk_from_proto(msg)
        except grpc.RpcError as e:
            raise error_from_rpc(e) from e
        finally:
            call.cancel()

    def wait_run(
        self,
        run_id: str,
        *,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> Run:
        """Poll until the run is final and return it. Raises TimeoutError after ``timeout``
        seconds (None = no limit)."""
        waiter = _Waiter(timeout, poll_interval)
        while True:
            run = self.get_run(run_id)
            if run.is_final:
                return run
            time.sleep(waiter.next_delay(f"run {run_id} (state {run.state})"))

    def wait_job_runs(
        self,
        job_id: str,
        *,
        count: int,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> list[Run]:
        """Poll until the job has at least ``count`` final runs (every attempt counts) and
        return all its final runs, newest first. Raises TimeoutError after ``timeout``."""
        waiter = _Waiter(timeout, poll_interval)
        while True:
            runs = list(self.iter_runs(job_id, states=FINAL_RUN_STATES))
            missing = _final_runs_wanted(runs, count, job_id)
            if not missing:
                return runs
            time.sleep(waiter.next_delay(missing))

    # dead letters

    def list_dead_letters(
        self, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        """Runs that failed with no attempt left; no ``job_id`` = every job of the owner."""
        req = _list_dead_letters_request(job_id, page_size, page_token)
        return _runs_page(self._call(self._jobs.ListDeadLetters, req))

    def replay_dead_letters(self, *, run_ids: Iterable[str] = (), job_id: str = "") -> list[Run]:
        """Start a new run for each dead letter named (by id, or all of ``job_id``)."""
        req = _dead_letters_request(run_ids, job_id)
        return _runs(self._call(self._jobs.ReplayDeadLetters, req))

    def drop_dead_letters(self, *, run_ids: Iterable[str] = (), job_id: str = "") -> int:
        """Forget the dead letters named (by id, or all of ``job_id``); returns how many."""
        req = _dead_letters_request(run_ids, job_id)
        return _dropped(self._call(self._jobs.DropDeadLetters, req))

    # cluster

    def cluster_status(self) -> ClusterStatus:
        """Leader, epoch, members, shard map and connected workers."""
        req = cluster_pb2.GetStatusRequest()
        return cluster_status_from_proto(self._call(self._cluster.GetStatus, req))


# --------------------------------------------------------------------------- asyncio client


class AsyncClient:
    """``Client`` for asyncio: the same methods, as coroutines; ``read_output``,
    ``iter_jobs`` and ``iter_runs`` are async iterators. Use ``async with`` or
    ``await close()``. The channel is opened on the first call, so the client may be
    built outside the event loop it is used in."""

    def __init__(
        self,
        target: str | None = None,
        *,
        owner: str = DEFAULT_OWNER,
        timeout: float = 30.0,
        channel_options: Sequence[tuple[str, Any]] = (),
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.target = _resolve_target(target)
        self.owner = owner
        self.timeout = timeout
        self._options = list(channel_options)
        self._credentials = credentials
        self._metadata = ((OWNER_METADATA_KEY, owner),)
        self._channel: grpc.aio.Channel | None = None
        self._job_stub: jobs_pb2_grpc.JobServiceStub | None = None
        self._cluster_stub: cluster_pb2_grpc.ClusterServiceStub | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            self._job_stub = self._cluster_stub = None
            await channel.close()

    def _open(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = (
                grpc.aio.secure_channel(self.target, self._credentials, options=self._options)
                if self._credentials is not None
                else grpc.aio.insecure_channel(self.target, options=self._options)
            )
            self._job_stub = jobs_pb2_grpc.JobServiceStub(self._channel)
            self._cluster_stub = cluster_pb2_grpc.ClusterServiceStub(self._channel)
        return self._channel

    @property
    def _jobs(self) -> jobs_pb2_grpc.JobServiceStub:
        self._open()
        assert self._job_stub is not None
        return self._job_stub

    @property
    def _cluster(self) -> cluster_pb2_grpc.ClusterServiceStub:
        self._open()
        assert self._cluster_stub is not None
        return self._cluster_stub

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_from_rpc(e) from e

    # jobs

    async def create_job(self, spec: JobSpec, *, idempotency_key: str = "") -> Job:
        """See ``Client.create_job``."""
        return (await self.create_job_ex(spec, idempotency_key=idempotency_key))[0]

    async def create_job_ex(self, spec: JobSpec, *, idempotency_key: str = "") -> tuple[Job, bool]:
        """See ``Client.create_job_ex``."""
        req = _create_job_request(spec, idempotency_key)
        return _created_job(await self._call(self._jobs.CreateJob, req))

    async def create_jobs(self, specs: Sequence[JobSpecArg]) -> list[Job]:
        """See ``Client.create_jobs``."""
        return _created_jobs(await self._call(self._jobs.CreateJobs, _create_jobs_request(specs)))

    async def get_job(self, job_id: str) -> Job:
        return job_from_proto(await self._call(self._jobs.GetJob, _get_job_request(job_id)))

    async def list_jobs(
        self,
        *,
        states: Iterable[JobState] = (),
        name_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Job]:
        """See ``Client.list_jobs``."""
        req = _list_jobs_request(states, name_prefix, labels, page_size, page_token)
        return _jobs_page(await self._call(self._jobs.ListJobs, req))

    async def iter_jobs(
        self,
        *,
        states: Iterable[JobState] = (),
        name_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Job]:
        """See ``Client.iter_jobs``."""
        states, token = tuple(states), ""
        while True:
            page = await self.list_jobs(
                states=states,
                name_prefix=name_prefix,
                labels=labels,
                page_size=page_size,
                page_token=token,
            )
            for job in page.items:
                yield job
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def update_job(self, job_id: str, spec: JobSpec, *, expected_version: int) -> Job:
        """See ``Client.update_job``."""
        req = _update_job_request(job_id, spec, expected_version)
        return job_from_proto(await self._call(self._jobs.UpdateJob, req))

    async def pause_job(self, job_id: str, *, expected_version: int = 0) -> Job:
        req = _job_ref(job_id, expected_version)
        return job_from_proto(await self._call(self._jobs.PauseJob, req))

    async def resume_job(self, job_id: str, *, expected_version: int = 0) -> Job:
        req = _job_ref(job_id, expected_version)
        return job_from_proto(await self._call(self._jobs.ResumeJob, req))

    async def run_job_now(self, job_id: str, *, expected_version: int = 0) -> Run:
        req = _job_ref(job_id, expected_version)
        return run_from_proto(await self._call(self._jobs.RunJobNow, req))

    async def delete_job(
        self, job_id: str, *, cancel_running: bool = False, expected_version: int = 0
    ) -> Job:
        """See ``Client.delete_job``."""
        req = _delete_job_request(job_id, cancel_running, expected_version)
        return job_from_proto(await self._call(self._jobs.DeleteJob, req))

    async def preview_fires(
        self, schedule_or_job_id: Schedule | str, *, count: int = 10, after: datetime | None = None
    ) -> list[Fire]:
        """See ``Client.preview_fires``."""
        req = _preview_fires_request(schedule_or_job_id, count, after)
        return _fires(await self._call(self._jobs.PreviewFires, req))

    # runs

    async def list_runs(
        self,
        job_id: str,
        *,
        states: Iterable[RunState] = (),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        """See ``Client.list_runs``."""
        req = _list_runs_request(job_id, states, page_size, page_token)
        return _runs_page(await self._call(self._jobs.ListRuns, req))

    async def iter_runs(
        self, job_id: str, *, states: Iterable[RunState] = (), page_size: int = 100
    ) -> AsyncIterator[Run]:
        """See ``Client.iter_runs``."""
        states, token = tuple(states), ""
        while True:
            page = await self.list_runs(
                job_id, states=states, page_size=page_size, page_token=token
            )
            for run in page.items:
                yield run
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def get_run(self, run_id: str) -> Run:
        return run_from_proto(await self._call(self._jobs.GetRun, _run_request(run_id)))

    async def cancel_run(self, run_id: str) -> Run:
        return run_from_proto(await self._call(self._jobs.CancelRun, _run_request(run_id)))

    async def read_output(
        self, run_id: str, *, offset: int = 0, follow: bool = False
    ) -> AsyncIterator[OutputChunk]:
        """See ``Client.read_output``; iterate with ``async for``."""
        req = _read_output_request(run_id, offset, follow)
        call = self._jobs.ReadRunOutput(
            req, timeout=None if follow else self.timeout, metadata=self._metadata
        )
        try:
            async for msg in call:
                yield output_chunk_from_proto(msg)
        except grpc.RpcError as e:
            raise error_from_rpc(e) from e
        finally:
            call.cancel()

    async def wait_run(
        self,
        run_id: str,
        *,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> Run:
        """See ``Client.wait_run``."""
        waiter = _Waiter(timeout, poll_interval)
        while True:
            run = await self.get_run(run_id)
            if run.is_final:
                return run
            await asyncio.sleep(waiter.next_delay(f"run {run_id} (state {run.state})"))

    async def wait_job_runs(
        self,
        job_id: str,
        *,
        count: int,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> list[Run]:
        """See ``Client.wait_job_runs``."""
        waiter = _Waiter(timeout, poll_interval)
        while True:
            runs = [r async for r in self.iter_runs(job_id, states=FINAL_RUN_STATES)]
            missing = _final_runs_wanted(runs, count, job_id)
            if not missing:
                return runs
            await asyncio.sleep(waiter.next_delay(missing))

    # dead letters

    async def list_dead_letters(
        self, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        """See ``Client.list_dead_letters``."""
        req = _list_dead_letters_request(job_id, page_size, page_token)
        return _runs_page(await self._call(self._jobs.ListDeadLetters, req))

    async def replay_dead_letters(
        self, *, run_ids: Iterable[str] = (), job_id: str = ""
    ) -> list[Run]:
        """See ``Client.replay_dead_letters``."""
        req = _dead_letters_request(run_ids, job_id)
        return _runs(await self._call(self._jobs.ReplayDeadLetters, req))

    async def drop_dead_letters(self, *, run_ids: Iterable[str] = (), job_id: str = "") -> int:
        """See ``Client.drop_dead_letters``."""
        req = _dead_letters_request(run_ids, job_id)
        return _dropped(await self._call(self._jobs.DropDeadLetters, req))

    # cluster

    async def cluster_status(self) -> ClusterStatus:
        req = cluster_pb2.GetStatusRequest()
        return cluster_status_from_proto(await self._call(self._cluster.GetStatus, req))


__all__ = ["DEFAULT_TARGET", "OWNER_METADATA_KEY", "AsyncClient", "Client"]

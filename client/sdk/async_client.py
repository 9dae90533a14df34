"""``AsyncClient``: the asyncio SDK of shardcron, the methods of ``Client`` as coroutines.

It speaks the same requests and reads the same replies (``messages``) as ``Client`` and
raises the same errors; only the calls differ: awaited, with ``async for`` over output
and pages. The channel is opened on the first call, inside the running loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from shardcron.client.codec import (
    cluster_status_from_proto,
    error_from_rpc,
    job_from_proto,
    output_chunk_from_proto,
    run_from_proto,
)
from shardcron.client.codec.notify import notify_settings_from_proto
from shardcron.client.sdk import messages
from shardcron.client.sdk.connection import (
    ClientChannels,
    call_metadata,
    resolve_target,
    resolve_token,
)
from shardcron.client.sdk.messages import JobSpecArg
from shardcron.client.sdk.waiting import (
    DEFAULT_POLL_INTERVAL,
    ServerWait,
    Waiter,
    final_runs_wanted,
)
from shardcron.client.tls import channel_credentials
from shardcron.client.types import (
    FINAL_RUN_STATES,
    ClusterStatus,
    Delivery,
    Fire,
    Job,
    JobSpec,
    JobState,
    NotifyPolicy,
    NotifySettings,
    OutputChunk,
    Page,
    Run,
    RunState,
    Schedule,
)
from shardcron.v1 import cluster_pb2_grpc, jobs_pb2, jobs_pb2_grpc


class AsyncClient:
    """``Client`` for asyncio: the same methods, as coroutines; ``read_output``,
    ``iter_jobs`` and ``iter_runs`` are async iterators. Use ``async with`` or
    ``await close()``. The channel is opened on the first call, so the client may be
    built outside the event loop it is used in. ``owner``, ``token`` and TLS (``tls_ca``,
    ``tls_cert``, ``tls_key`` or ``credentials``) as for ``Client``."""

    def __init__(
        self,
        target: str | None = None,
        *,
        owner: str | None = None,
        timeout: float = 30.0,
        channel_options: Sequence[tuple[str, Any]] = (),
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
        tls_ca: str | Path | None = None,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
    ) -> None:
        self.target = resolve_target(target)
        self.owner = owner
        self.timeout = timeout
        self._channels = ClientChannels(
            self.target,
            credentials=channel_credentials(credentials, ca=tls_ca, cert=tls_cert, key=tls_key),
            options=channel_options,
            asyncio=True,
        )
        self._metadata = call_metadata(owner, resolve_token(token))
        self._channel: grpc.aio.Channel | None = None
        self._job_stub: jobs_pb2_grpc.JobServiceStub | None = None
        self._cluster_stub: cluster_pb2_grpc.ClusterServiceStub | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._channel = None
        self._job_stub = self._cluster_stub = None
        for channel in self._channels.take_open():
            await channel.close()

    def _open(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = self._channels.calls()
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
        req = messages.create_job_request(spec, idempotency_key)
        stub = self._channels.jobs_for_create([(spec, idempotency_key)], self._jobs)
        return messages.created_job(await self._call(stub.CreateJob, req))

    async def create_jobs(self, specs: Sequence[JobSpecArg]) -> list[Job]:
        """See ``Client.create_jobs``."""
        req = messages.create_jobs_request(specs)
        return messages.created_jobs(
            await self._call(self._channels.jobs_for_create(specs, self._jobs).CreateJobs, req)
        )

    async def create_job_ids(self, specs: Sequence[JobSpecArg]) -> list[str]:
        """See ``Client.create_job_ids``."""
        req = messages.create_jobs_request(specs, ids_only=True)
        return messages.created_job_ids(
            await self._call(self._channels.jobs_for_create(specs, self._jobs).CreateJobs, req)
        )

    async def upload_artifact(self, source: messages.ArtifactSource) -> str:
        """See ``Client.upload_artifact``."""
        requests = messages.upload_artifact_requests(source)
        return messages.uploaded_artifact(await self._call(self._jobs.UploadArtifact, requests))

    async def get_job(self, job_id: str) -> Job:
        return job_from_proto(await self._call(self._jobs.GetJob, messages.get_job_request(job_id)))

    async def list_jobs(
        self,
        *,
        states: Iterable[JobState] = (),
        name_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
        page_token: str = "",
        with_health: bool = False,
    ) -> Page[Job]:
        """See ``Client.list_jobs``."""
        req = messages.list_jobs_request(
            states, name_prefix, labels, page_size, page_token, with_health
        )
        return messages.jobs_page(await self._call(self._jobs.ListJobs, req))

    async def iter_jobs(
        self,
        *,
        states: Iterable[JobState] = (),
        name_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
        with_health: bool = False,
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
                with_health=with_health,
            )
            for job in page.items:
                yield job
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def update_job(self, job_id: str, spec: JobSpec, *, expected_version: int) -> Job:
        """See ``Client.update_job``."""
        req = messages.update_job_request(job_id, spec, expected_version)
        return job_from_proto(await self._call(self._jobs.UpdateJob, req))

    async def pause_job(self, job_id: str, *, expected_version: int = 0) -> Job:
        req = messages.job_ref(job_id, expected_version)
        return job_from_proto(await self._call(self._jobs.PauseJob, req))

    async def resume_job(self, job_id: str, *, expected_version: int = 0) -> Job:
        req = messages.job_ref(job_id, expected_version)
        return job_from_proto(await self._call(self._jobs.ResumeJob, req))

    async def run_job_now(self, job_id: str, *, expected_version: int = 0) -> Run:
        req = messages.job_ref(job_id, expected_version)
        return run_from_proto(await self._call(self._jobs.RunJobNow, req))

    async def delete_job(
        self, job_id: str, *, cancel_running: bool = False, expected_version: int = 0
    ) -> Job:
        """See ``Client.delete_job``."""
        req = messages.delete_job_request(job_id, cancel_running, expected_version)
        return job_from_proto(await self._call(self._jobs.DeleteJob, req))

    async def preview_fires(
        self, schedule_or_job_id: Schedule | str, *, count: int = 10, after: datetime | None = None
    ) -> list[Fire]:
        """See ``Client.preview_fires``."""
        req = messages.preview_fires_request(schedule_or_job_id, count, after)
        return messages.fires(await self._call(self._jobs.PreviewFires, req))

    # runs

    async def list_runs(
        self,
        job_id: str = "",
        *,
        states: Iterable[RunState] = (),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        """See ``Client.list_runs``."""
        req = messages.list_runs_request(job_id, states, page_size, page_token)
        return messages.runs_page(await self._call(self._jobs.ListRuns, req))

    async def iter_runs(
        self, job_id: str = "", *, states: Iterable[RunState] = (), page_size: int = 100
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
        return run_from_proto(await self._call(self._jobs.GetRun, messages.run_request(run_id)))

    async def cancel_run(self, run_id: str) -> Run:
        return run_from_proto(await self._call(self._jobs.CancelRun, messages.run_request(run_id)))

    async def read_result(
        self, run_id: str, name: str, *, offset: int = 0, limit: int = 0
    ) -> AsyncIterator[bytes]:
        """See ``Client.read_result``; iterate with ``async for``."""
        req = messages.read_result_request(run_id, name, offset, limit)
        call = self._jobs.ReadRunResult(req, timeout=self.timeout, metadata=self._metadata)
        try:
            async for msg in call:
                yield msg.data
        except grpc.RpcError as e:
            raise error_from_rpc(e) from e
        finally:
            call.cancel()

    async def read_output(
        self, run_id: str, *, offset: int = 0, follow: bool = False, limit: int = 0
    ) -> AsyncIterator[OutputChunk]:
        """See ``Client.read_output``; iterate with ``async for``."""
        while True:
            req = messages.read_output_request(run_id, offset, follow, limit)
            call = self._jobs.ReadRunOutput(
                req, timeout=None if follow else self.timeout, metadata=self._metadata
            )
            try:
                async for msg in call:
                    chunk = output_chunk_from_proto(msg)
                    offset = chunk.offset + len(chunk.data)
                    yield chunk
                    if chunk.eof:
                        return
            except grpc.RpcError as e:
                raise error_from_rpc(e) from e
            finally:
                call.cancel()
            if not follow:
                return

    async def wait_run(
        self,
        run_id: str,
        *,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> Run:
        """See ``Client.wait_run``."""
        wait = ServerWait(run_id, timeout, self.timeout)
        while wait.supported:
            request, deadline = wait.next_call()
            try:
                reply = await self._jobs.WaitRun(request, timeout=deadline, metadata=self._metadata)
            except grpc.RpcError as e:
                wait.failed(e)
            else:
                if (final := wait.answered(reply)) is not None:
                    return final
        waiter = Waiter(timeout, poll_interval)
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
        waiter = Waiter(timeout, poll_interval)
        while True:
            runs = [r async for r in self.iter_runs(job_id, states=FINAL_RUN_STATES)]
            missing = final_runs_wanted(runs, count, job_id)
            if not missing:
                return runs
            await asyncio.sleep(waiter.next_delay(missing))

    # notifications

    async def list_deliveries(
        self, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Delivery]:
        """See ``Client.list_deliveries``."""
        req = messages.list_deliveries_request(job_id, page_size, page_token)
        return messages.deliveries_page(await self._call(self._jobs.ListDeliveries, req))

    async def notify_settings(self) -> NotifySettings:
        """See ``Client.notify_settings``."""
        req = jobs_pb2.GetNotifySettingsRequest()
        return notify_settings_from_proto(await self._call(self._jobs.GetNotifySettings, req))

    async def set_notify_defaults(self, defaults: NotifyPolicy | None) -> NotifySettings:
        """See ``Client.set_notify_defaults``."""
        req = messages.notify_defaults_request(defaults)
        return notify_settings_from_proto(await self._call(self._jobs.SetNotifyDefaults, req))

    async def set_notify_secret(self, secret: str) -> NotifySettings:
        """See ``Client.set_notify_secret``."""
        req = jobs_pb2.SetNotifySecretRequest(secret=secret)
        return notify_settings_from_proto(await self._call(self._jobs.SetNotifySecret, req))

    # dead letters

    async def list_dead_letters(
        self, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        """See ``Client.list_dead_letters``."""
        req = messages.list_dead_letters_request(job_id, page_size, page_token)
        return messages.runs_page(await self._call(self._jobs.ListDeadLetters, req))

    async def replay_dead_letters(
        self, *, run_ids: Iterable[str] = (), job_id: str = ""
    ) -> list[Run]:
        """See ``Client.replay_dead_letters``."""
        req = messages.dead_letters_request(run_ids, job_id)
        return messages.runs(await self._call(self._jobs.ReplayDeadLetters, req))

    async def drop_dead_letters(self, *, run_ids: Iterable[str] = (), job_id: str = "") -> int:
        """See ``Client.drop_dead_letters``."""
        req = messages.dead_letters_request(run_ids, job_id)
        return messages.dropped(await self._call(self._jobs.DropDeadLetters, req))

    # cluster

    async def cluster_status(self) -> ClusterStatus:
        req = messages.cluster_status_request()
        return cluster_status_from_proto(await self._call(self._cluster.GetStatus, req))

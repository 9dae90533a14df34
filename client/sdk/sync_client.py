"""``Client``: the blocking SDK of shardcron, for JobService and ClusterService.

It takes and returns the domain types of ``shardcron.client.types``; every failed call
raises a ``shardcron.client.errors.ShardcronError`` (``.code`` is the gRPC status name)
made by ``codec.error_from_rpc``. Requests and replies are built and read by
``messages``, which ``AsyncClient`` shares; this class only chooses how to call.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc

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


class Client:
    """Blocking client of a shardcron cluster (any api node).

    ``target`` is one api node's ``host:port`` or several, comma-separated, to fail over
    among (``connection`` says which calls are retried on another); it defaults to
    ``$SHARDCRON_TARGET`` or ``127.0.0.1:7400``; every call is scoped to ``owner``
    (None: the one owner of the token's principal, or ``default``) and given ``timeout``
    seconds (except followed output). ``token`` (else ``$SHARDCRON_TOKEN``) is sent as
    ``authorization: Bearer TOKEN`` to a node with an auth file.
    TLS: ``tls_ca`` (the CA that signed the nodes' certificates), plus ``tls_cert`` and
    ``tls_key`` where nodes require client certificates; each one not given is read from
    ``$SHARDCRON_TLS_CA``, ``$SHARDCRON_TLS_CERT``, ``$SHARDCRON_TLS_KEY``
    (``shardcron.client.tls``), and ready ``credentials`` replace them all. Plaintext when
    none is set. Use as a context manager or ``close()``.
    """

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
        )
        self._channel: grpc.Channel = self._channels.calls()
        self._metadata = call_metadata(owner, resolve_token(token))
        self._jobs = jobs_pb2_grpc.JobServiceStub(self._channel)
        self._cluster = cluster_pb2_grpc.ClusterServiceStub(self._channel)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._channels.take_open():
            channel.close()

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
        req = messages.create_job_request(spec, idempotency_key)
        stub = self._channels.jobs_for_create([(spec, idempotency_key)], self._jobs)
        return messages.created_job(self._call(stub.CreateJob, req))

    def create_jobs(self, specs: Sequence[JobSpecArg]) -> list[Job]:
        """Create several jobs, all or none; a spec may be paired with its idempotency key.
        A bad one fails the batch with InvalidArgument naming ``jobs[i]``."""
        req = messages.create_jobs_request(specs)
        return messages.created_jobs(
            self._call(self._channels.jobs_for_create(specs, self._jobs).CreateJobs, req)
        )

    def create_job_ids(self, specs: Sequence[JobSpecArg]) -> list[str]:
        """``create_jobs``, answered with the jobs' ids alone (in order): for bulk
        submits, which need no echo of what they sent. Just as durable."""
        req = messages.create_jobs_request(specs, ids_only=True)
        return messages.created_job_ids(
            self._call(self._channels.jobs_for_create(specs, self._jobs).CreateJobs, req)
        )

    def upload_artifact(self, source: messages.ArtifactSource) -> str:
        """Uploads a job's code archive (a tar or tar.gz file's path, or its bytes) for
        this owner and returns its sha256: a ``CommandTask(artifact=...)`` names it. The
        same bytes are stored once; an unsafe archive is refused with InvalidArgument
        naming the entry."""
        requests = messages.upload_artifact_requests(source)
        return messages.uploaded_artifact(self._call(self._jobs.UploadArtifact, requests))

    def get_job(self, job_id: str) -> Job:
        """Raises NotFound for an unknown id (or one of another owner)."""
        return job_from_proto(self._call(self._jobs.GetJob, messages.get_job_request(job_id)))

    def list_jobs(
        self,
        *,
        states: Iterable[JobState] = (),
        name_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
        page_token: str = "",
        with_health: bool = False,
    ) -> Page[Job]:
        """One page of the owner's jobs; no ``states`` = all but DELETED; every label given
        must match. Pass ``next_page_token`` back as ``page_token`` for the next page.
        ``with_health``: each job with its last runs and success rate (``Job.health``)."""
        req = messages.list_jobs_request(
            states, name_prefix, labels, page_size, page_token, with_health
        )
        return messages.jobs_page(self._call(self._jobs.ListJobs, req))

    def iter_jobs(
        self,
        *,
        states: Iterable[JobState] = (),
        name_prefix: str = "",
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
        with_health: bool = False,
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
                with_health=with_health,
            )
            yield from page.items
            if not page.next_page_token:
                return
            token = page.next_page_token

    def update_job(self, job_id: str, spec: JobSpec, *, expected_version: int) -> Job:
        """Replace the job's spec. Raises VersionConflict when the job is no longer at
        ``expected_version``; a changed schedule recomputes the next fire."""
        req = messages.update_job_request(job_id, spec, expected_version)
        return job_from_proto(self._call(self._jobs.UpdateJob, req))

    def pause_job(self, job_id: str, *, expected_version: int = 0) -> Job:
        """No further fires run until resumed (they are recorded SKIPPED, PAUSED).
        ``expected_version`` 0 = any."""
        return job_from_proto(
            self._call(self._jobs.PauseJob, messages.job_ref(job_id, expected_version))
        )

    def resume_job(self, job_id: str, *, expected_version: int = 0) -> Job:
        return job_from_proto(
            self._call(self._jobs.ResumeJob, messages.job_ref(job_id, expected_version))
        )

    def run_job_now(self, job_id: str, *, expected_version: int = 0) -> Run:
        """Start one extra run now, outside the schedule."""
        return run_from_proto(
            self._call(self._jobs.RunJobNow, messages.job_ref(job_id, expected_version))
        )

    def delete_job(
        self, job_id: str, *, cancel_running: bool = False, expected_version: int = 0
    ) -> Job:
        """No further runs; with ``cancel_running`` leased and running ones are cancelled."""
        req = messages.delete_job_request(job_id, cancel_running, expected_version)
        return job_from_proto(self._call(self._jobs.DeleteJob, req))

    def preview_fires(
        self, schedule_or_job_id: Schedule | str, *, count: int = 10, after: datetime | None = None
    ) -> list[Fire]:
        """The next ``count`` fires after ``after`` (default now) of a schedule or of a job."""
        req = messages.preview_fires_request(schedule_or_job_id, count, after)
        return messages.fires(self._call(self._jobs.PreviewFires, req))

    # runs

    def list_runs(
        self,
        job_id: str = "",
        *,
        states: Iterable[RunState] = (),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        """One page of the job's runs, newest first; no ``states`` = all. With no
        ``job_id``, the runs of every job of the owner (``states={RunState.RUNNING}``: all
        that run now), by job id, then newest first; such a page may be short, even
        empty, while it has a next token (``iter_runs`` follows them)."""
        req = messages.list_runs_request(job_id, states, page_size, page_token)
        return messages.runs_page(self._call(self._jobs.ListRuns, req))

    def iter_runs(
        self, job_id: str = "", *, states: Iterable[RunState] = (), page_size: int = 100
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
        return run_from_proto(self._call(self._jobs.GetRun, messages.run_request(run_id)))

    def cancel_run(self, run_id: str) -> Run:
        """Cancel a pending or running run (the worker kills it); returns the run."""
        return run_from_proto(self._call(self._jobs.CancelRun, messages.run_request(run_id)))

    def read_result(
        self, run_id: str, name: str, *, offset: int = 0, limit: int = 0
    ) -> Iterator[bytes]:
        """The bytes of the run's result file ``name`` (``Run.results`` lists them) from
        ``offset``, at most ``limit`` (0: to its end), in pieces of at most 1 MiB."""
        req = messages.read_result_request(run_id, name, offset, limit)
        call = self._jobs.ReadRunResult(req, timeout=self.timeout, metadata=self._metadata)
        try:
            for msg in call:
                yield msg.data
        except grpc.RpcError as e:
            raise error_from_rpc(e) from e
        finally:
            call.cancel()

    def read_output(
        self, run_id: str, *, offset: int = 0, follow: bool = False, limit: int = 0
    ) -> Iterator[OutputChunk]:
        """The run's output from byte ``offset`` (negative: from the end), at most
        ``limit`` bytes (0: to the end; not with ``follow``): whole when the node keeps
        runs' output in a blob store, else the tail its job store keeps. With
        ``follow``, keeps streaming until the run is final (the last chunk has ``eof``):
        a node ends a follow after some minutes, and it is taken up again from where it
        ended."""
        while True:
            req = messages.read_output_request(run_id, offset, follow, limit)
            call = self._jobs.ReadRunOutput(
                req, timeout=None if follow else self.timeout, metadata=self._metadata
            )
            try:
                for msg in call:
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

    def wait_run(
        self,
        run_id: str,
        *,
        timeout: float | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> Run:
        """Wait until the run (one attempt) is final and return it. Raises TimeoutError
        after ``timeout`` seconds (None = no limit). The server wakes the call when the
        run ends (``WaitRun``); a node without ``WaitRun`` is polled every
        ``poll_interval`` seconds at most."""
        wait = ServerWait(run_id, timeout, self.timeout)
        while wait.supported:
            request, deadline = wait.next_call()
            try:
                reply = self._jobs.WaitRun(request, timeout=deadline, metadata=self._metadata)
            except grpc.RpcError as e:
                wait.failed(e)
            else:
                if (final := wait.answered(reply)) is not None:
                    return final
        waiter = Waiter(timeout, poll_interval)
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
        waiter = Waiter(timeout, poll_interval)
        while True:
            runs = list(self.iter_runs(job_id, states=FINAL_RUN_STATES))
            missing = final_runs_wanted(runs, count, job_id)
            if not missing:
                return runs
            time.sleep(waiter.next_delay(missing))

    # notifications

    def list_deliveries(
        self, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Delivery]:
        """Webhook deliveries of the owner's notifications, newest first, with each
        one's attempts and status; no ``job_id`` = every job of the owner."""
        req = messages.list_deliveries_request(job_id, page_size, page_token)
        return messages.deliveries_page(self._call(self._jobs.ListDeliveries, req))

    def notify_settings(self) -> NotifySettings:
        """The owner's default notification rules, and whether a signing secret is set."""
        req = jobs_pb2.GetNotifySettingsRequest()
        return notify_settings_from_proto(self._call(self._jobs.GetNotifySettings, req))

    def set_notify_defaults(self, defaults: NotifyPolicy | None) -> NotifySettings:
        """The rules every job of the owner without rules of its own follows; None: none."""
        req = messages.notify_defaults_request(defaults)
        return notify_settings_from_proto(self._call(self._jobs.SetNotifyDefaults, req))

    def set_notify_secret(self, secret: str) -> NotifySettings:
        """The secret the owner's deliveries are signed with (never shown back); "" removes it."""
        req = jobs_pb2.SetNotifySecretRequest(secret=secret)
        return notify_settings_from_proto(self._call(self._jobs.SetNotifySecret, req))

    # dead letters

    def list_dead_letters(
        self, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        """Runs that failed with no attempt left; no ``job_id`` = every job of the owner."""
        req = messages.list_dead_letters_request(job_id, page_size, page_token)
        return messages.runs_page(self._call(self._jobs.ListDeadLetters, req))

    def replay_dead_letters(self, *, run_ids: Iterable[str] = (), job_id: str = "") -> list[Run]:
        """Start a new run for each dead letter named (by id, or all of ``job_id``)."""
        req = messages.dead_letters_request(run_ids, job_id)
        return messages.runs(self._call(self._jobs.ReplayDeadLetters, req))

    def drop_dead_letters(self, *, run_ids: Iterable[str] = (), job_id: str = "") -> int:
        """Forget the dead letters named (by id, or all of ``job_id``); returns how many."""
        req = messages.dead_letters_request(run_ids, job_id)
        return messages.dropped(self._call(self._jobs.DropDeadLetters, req))

    # cluster

    def cluster_status(self) -> ClusterStatus:
        """Leader, epoch, members, shard map and connected workers."""
        req = messages.cluster_status_request()
        return cluster_status_from_proto(self._call(self._cluster.GetStatus, req))

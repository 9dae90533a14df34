"""The api role's logic: jobs and runs in domain terms, on a JobStore.

Stateless: everything is read from and written to the store. What must reach
the poller that owns a run (new runs due soon, cancels) goes through a
``PollerLink``; in ``shardcron dev`` that is the poller in the same process. On a
cluster node, a one-off job due soon gets an id whose shard this node's poller serves
(``JobsApi._new_job``), so its run reaches that poller in memory.
Validation happens before any write, so a rejected call changes nothing; every id,
version, count and time a call names is bounded (``validation``) before it reaches
the store. A run read while due and PENDING carries why it waits
(``Run.waiting_reason``): only the poller holding it knows, so reads ask it through
the ``PollerLink`` with a short timeout, and go without a reason if it does not
answer; the reason is never stored. ``wait_run`` waits for a run to be final
(``run_waits``: woken by this node's poller, or re-reading the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from shardcron.client import limits
from shardcron.client.dataclass_copies import copy_with
from shardcron.client.errors import FailedPrecondition, InvalidArgument, NotFound, ShardcronError
from shardcron.client.overview import Overview, OverviewPart, OverviewWindow
from shardcron.client.schedule import preview
from shardcron.client.types import (
    CommandTask,
    Fire,
    Job,
    JobSpec,
    JobState,
    OutputChunk,
    Page,
    Run,
    RunReason,
    RunState,
    Schedule,
    ScheduleKind,
)
from shardcron.coordinator.artifacts import Artifacts, record_refs, require_artifacts
from shardcron.coordinator.ids import (
    new_job_id,
    new_job_ids,
    placed_job_id,
    run_id,
    shard_for,
    utcnow,
)
from shardcron.coordinator.job_health import with_health as with_health_of
from shardcron.coordinator.metrics import Metrics
from shardcron.coordinator.notify.owner_api import NotifyApi
from shardcron.coordinator.notify.settings import OwnerSettingsBook
from shardcron.coordinator.output_blobs import OutputBlobs
from shardcron.coordinator.overviews import read_overview
from shardcron.coordinator.poller.fires import (
    MANUAL_PREFIX,
    REPLAY_PREFIX,
    first_fires,
    make_run,
    skip_records,
)
from shardcron.coordinator.quotas import QuotaGuard, Quotas
from shardcron.coordinator.result_blobs import read_result
from shardcron.coordinator.run_waits import RunEndings, wait_final, wait_seconds
from shardcron.coordinator.sealing import KeyRing
from shardcron.coordinator.secrets import secrets_for_create, secrets_for_update
from shardcron.coordinator.store import JobProgress, JobStore, NewJob
from shardcron.coordinator.validation import (
    identifier,
    optional_identifier,
    text,
    time_bound,
    valid_count,
    valid_version,
    validate_schedule_bounds,
    validate_spec,
)

MAX_BATCH = limits.MAX_BATCH
_ONE_FIRE = frozenset({ScheduleKind.IMMEDIATE, ScheduleKind.AT})
WAITING_REASON_WAIT = 1.0  # seconds a read waits for pollers to say why its runs wait


class PollerLink(Protocol):
    """How the api reaches the poller that owns a run's shard."""

    def runs_created(self, runs: Sequence[Run], jobs: Sequence[Job] = ()) -> None:
        """Best-effort hint: these PENDING runs (of these jobs, as stored) were just written."""

    async def cancel(self, run: Run, reason: RunReason) -> Run:
        """Cancels the run; returns it as it stands. Raises FailedPrecondition if final."""

    def cancel_job(self, job_id: str, reason: RunReason) -> None:
        """Cancels every leased or running run of the job."""

    def job_changed(self, job: Job) -> None:
        """Best-effort hint: the job's spec or state changed (``job`` as stored)."""

    async def waiting_reasons(self, runs: Sequence[Run]) -> dict[str, str]:
        """Best effort: why each of these due, PENDING runs is not on a worker yet, by
        run id, from the pollers that hold them (runs not held or not waiting left out)."""

    async def overview_parts(self, owner: str, window: OverviewWindow) -> list[OverviewPart]:
        """Best effort: every poller's part of the owner's overview (those that answer)."""


def without_spent_fire(job: Job) -> Job:
    """A COMPLETED job has no next fire: the one its row still names (a one-off job's
    only fire, whatever its run's outcome) is spent, and is not shown as due."""
    if job.state is not JobState.COMPLETED or job.next_fire_at is None:
        return job
    return dataclasses.replace(job, next_fire_at=None, next_fire_key="")


class JobsApi:
    def __init__(
        self,
        store: JobStore,
        link: PollerLink,
        metrics: Metrics,
        *,
        endings: RunEndings | None = None,
        served_here: Callable[[int], bool] = lambda shard: False,
        quotas: QuotaGuard | None = None,
        keys: KeyRing | None = None,
        place_within: timedelta = timedelta(0),
        output_blobs: OutputBlobs | None = None,
        artifacts: Artifacts | None = None,
        notify_allow_private: bool = False,
        notify_book: OwnerSettingsBook | None = None,
    ) -> None:
        """``endings`` is what this node's poller announces ended runs to, and
        ``served_here(shard)`` whether that poller holds the shard (``run_waits``);
        ``quotas`` the per-owner limits (without one, the generous defaults of
        ``quotas.DEFAULT_QUOTA``); ``keys`` what seals secret env values before they
        are stored (``sealing``; none: stored as given). A job of one fire due within
        ``place_within`` is placed on a shard served here (``_new_job``)."""
        self.store = store
        self.shard_count: int = store.shard_count  # fixed with the store's layout
        self.link = link
        self.metrics = metrics
        self.endings = endings or RunEndings()
        self.served_here = served_here
        self.quotas = quotas or QuotaGuard(Quotas(), store.count_jobs)
        self.notify = NotifyApi(  # webhooks, deliveries, owners' notification settings
            store, keys=keys, allow_private=notify_allow_private, book=notify_book
        )
        self.keys = keys
        self.place_within = place_within
        self.output_blobs = output_blobs  # None: a run's output is the job store's tail
        self.artifacts = artifacts  # None: no blob store, no job may name an artifact

    def _sealed(self, spec: JobSpec) -> JobSpec:
        return spec if self.keys is None else self.keys.sealed_spec(spec)

    # --- jobs -----------------------------------------------------------------

    def _new_job(
        self, job_id: str, owner: str, spec: JobSpec, key: str, now: datetime, place: bool
    ) -> NewJob:
        """With ``place``, a job of one fire due within ``place_within`` gets an id whose
        shard this node's poller serves: its run is handed to that poller in memory
        (``PollerLink.runs_created``), not hinted to another node, which would read it
        and its job back from the store before holding it. A job of many fires keeps
        the shard its id drew: it stays on its shard for good, and jobs created
        through one node would crowd that node's shards."""
        if spec.schedule.kind == ScheduleKind.INTERVAL and spec.schedule.anchor is None:
            anchor = spec.schedule.start_at or now
            spec = spec.replace(schedule=dataclasses.replace(spec.schedule, anchor=anchor))
        fire, skipped = first_fires(spec.schedule, now)  # the job is made once, with them
        if (
            place
            and fire is not None
            and spec.schedule.kind in _ONE_FIRE
            and fire.at - now <= self.place_within
        ):
            job_id = placed_job_id(job_id, self.served_here, self.shard_count)
        job = Job(
            id=job_id,
            owner=owner,
            spec=spec,
            state=JobState.ACTIVE if fire is not None else JobState.COMPLETED,
            version=1,
            schedule_version=1,
            created_at=now,
            updated_at=now,
            idempotency_key=key,
            next_fire_at=None if fire is None else fire.at,
            next_fire_key="" if fire is None else fire.key,
        )
        return self._first_runs(job, fire, skipped, now)

    def _with_first_fire(self, job: Job, now: datetime) -> NewJob:
        fire, skipped = first_fires(job.spec.schedule, now)
        if fire is None:
            job = copy_with(job, next_fire_at=None, next_fire_key="", state=JobState.COMPLETED)
        else:
            job = copy_with(job, next_fire_at=fire.at, next_fire_key=fire.key)
        return self._first_runs(job, fire, skipped, now)

    def _first_runs(
        self, job: Job, fire: Fire | None, skipped: list[Fire], now: datetime
    ) -> NewJob:
        """The new job with the records of its ``skipped`` fires and the run of its first
        ``fire`` (its next fire already set: the runs do not read it)."""
        shards = self.shard_count
        runs = skip_records(job, skipped, shard_count=shards, now=now)
        if fire is not None:
            run = make_run(job, fire, shard_count=shards, now=now)
            if run.due_at < now:  # an AT in the past runs now
                run = copy_with(run, due_at=now, id=run_id(job.id, fire.key, 1, now))
            runs.append(run)
        return NewJob(job=job, runs=runs)

    async def create_jobs(
        self, owner: str, items: Sequence[tuple[JobSpec, str]]
    ) -> list[tuple[Job, bool]]:
        if len(items) > MAX_BATCH:
            raise InvalidArgument("jobs", f"at most {MAX_BATCH} jobs per call")
        single = len(items) == 1
        checked: list[tuple[JobSpec, str]] = []
        kept: dict[int, JobSpec] = {}  # by id(): a spec shared by many jobs is checked once
        with_artifacts: list[tuple[JobSpec, str]] = []
        for i, (spec, key) in enumerate(items):  # field names made only when needed
            stored = kept.get(id(spec))
            if stored is None:
                spec_field = "spec" if single else f"jobs[{i}].spec"
                validate_spec(spec, spec_field)
                if isinstance(spec.task, CommandTask) and spec.task.artifact:
                    with_artifacts.append((spec, spec_field))
                stored = kept[id(spec)] = self._sealed(secrets_for_create(spec, spec_field))
            if key:  # the empty key (none) is valid
                key_field = "idempotency_key" if single else f"jobs[{i}].idempotency_key"
                text(key, key_field, limits.MAX_IDEMPOTENCY_KEY)
            checked.append((stored, key))
        await self.notify.check_webhooks(checked, single=single)
        items = checked
        await require_artifacts(self.artifacts, owner, with_artifacts)
        await self.quotas.check_creates(owner, len(items))
        not_made = len(items)  # what the reservation gives back: all, until the write
        try:
            now = utcnow()
            ids = new_job_ids(len(items))
            place = self.place_within > timedelta(0) and any(
                self.served_here(shard) for shard in range(self.shard_count)
            )
            new = [
                self._new_job(job_id, owner, spec, key, now, place)
                for job_id, (spec, key) in zip(ids, items, strict=True)
            ]
            await record_refs(self.store, owner, [n.job for n in new])
            not_made = 0  # a write that raises may have landed: kept counted
            results = await self.store.create_jobs(new)
            created = [n for n, (_, fresh) in zip(new, results, strict=True) if fresh]
            not_made = len(items) - len(created)  # replays of an idempotency key
        finally:
            self.quotas.creates_ended(owner, len(items), not_made)
        self.metrics.jobs_created.inc(len(created))
        self._hint([r for n in created for r in n.runs], [n.job for n in created])
        return results

    def _hint(self, runs: Sequence[Run], jobs: Sequence[Job] = ()) -> None:
        pending = [r for r in runs if r.state == RunState.PENDING]
        if pending:
            self.link.runs_created(pending, jobs)

    async def get_job(self, owner: str, job_id: str) -> Job:
        return without_spent_fire(await self.store.get_job(owner, identifier(job_id, "job_id")))

    async def job_deleted(self, owner: str, job_id: str) -> bool:
        """Whether the job is deleted (or gone: expired, or never the owner's)."""
        try:
            job = await self.store.get_job(owner, job_id)
        except NotFound:
            return True
        return job.state == JobState.DELETED

    async def list_jobs(
        self, owner: str, *, with_health: bool = False, **filters: object
    ) -> Page[Job]:
        """The owner's jobs (``JobStore.list_jobs``); ``with_health``: each with its last
        runs (``job_health``)."""
        page = await self.store.list_jobs(owner, **filters)  # type: ignore[arg-type]
        jobs = [without_spent_fire(j) for j in page.items]
        if with_health:
            jobs = await with_health_of(self.store, owner, jobs, utcnow())
        return dataclasses.replace(page, items=jobs)

    async def _load(self, owner: str, job_id: str, expected_version: int) -> Job:
        identifier(job_id, "job_id")
        valid_version(expected_version)
        return await self.store.get_job(owner, job_id)

    async def update_job(
        self, owner: str, job_id: str, spec: JobSpec, expected_version: int
    ) -> Job:
        valid_version(expected_version, required=True)
        validate_spec(spec)
        await require_artifacts(self.artifacts, owner, [(spec, "spec")])
        job = await self._load(owner, job_id, expected_version)
        if job.state == JobState.DELETED:
            raise FailedPrecondition(f"job {job_id} is deleted")
        as_stored = job.spec if self.keys is None else self.keys.opened_spec(job.spec)
        spec = secrets_for_update(as_stored, spec)
        validate_spec(spec)  # the merged secrets count against the env budget too
        await self.notify.check_webhooks([(spec, "")], single=True)
        spec = self._sealed(spec)
        now = utcnow()
        if spec.schedule.kind == ScheduleKind.INTERVAL and spec.schedule.anchor is None:
            anchor = (
                job.spec.schedule.anchor
                if job.spec.schedule.interval == spec.schedule.interval
                else None
            )
            spec = spec.replace(schedule=dataclasses.replace(spec.schedule, anchor=anchor or now))
        version = expected_version + 1
        updated = dataclasses.replace(job, spec=spec, updated_at=now)
        runs: list[Run] = []
        progress = None
        if spec.schedule != job.spec.schedule:
            state = JobState.ACTIVE if job.state == JobState.COMPLETED else job.state
            rescheduled = dataclasses.replace(updated, schedule_version=version, state=state)
            fresh = self._with_first_fire(rescheduled, now)
            updated, runs = fresh.job, list(fresh.runs)
            progress = JobProgress(
                job_id=job_id,
                next_fire_at=updated.next_fire_at,
                next_fire_key=updated.next_fire_key,
            )
        due = [r for r in runs if r.state == RunState.PENDING]
        await record_refs(self.store, owner, [updated])
        stored = await self.store.update_job(
            updated, expected_version=expected_version, progress=progress, runs=runs, due=due
        )
        self.link.job_changed(stored)
        self._hint(due)
        if stored.schedule_version != job.schedule_version:
            # fires of the old schedule end now, not when they would have come due
            for old in await self.store.list_active_runs(job_id):
                superseded = 0 < old.schedule_version < stored.schedule_version and old.attempt == 1
                if superseded and old.state == RunState.PENDING:
                    with contextlib.suppress(FailedPrecondition):
                        await self.link.cancel(old, RunReason.SUPERSEDED)
        return stored

    async def _set_state(
        self,
        job: Job,
        expected_version: int,
        state: JobState,
        *,
        pause_reason: str = "",
        progress: JobProgress | None = None,
        runs: Sequence[Run] = (),
    ) -> Job:
        updated = dataclasses.replace(
            job, state=state, updated_at=utcnow(), pause_reason=pause_reason
        )
        stored = await self.store.update_job(
            updated,
            expected_version=expected_version or job.version,
            progress=progress,
            runs=runs,
            due=runs,
        )
        self.link.job_changed(stored)
        return stored

    async def pause_job(self, owner: str, job_id: str, expected_version: int = 0) -> Job:
        job = await self._load(owner, job_id, expected_version)
        if job.state == JobState.PAUSED:
            return job
        if job.state != JobState.ACTIVE:
            raise FailedPrecondition(
                f"job {job_id} is {job.state.value}; only an ACTIVE job can be paused"
            )
        return await self._set_state(
            job, expected_version, JobState.PAUSED, pause_reason="paused by user"
        )

    async def resume_job(self, owner: str, job_id: str, expected_version: int = 0) -> Job:
        job = await self._load(owner, job_id, expected_version)
        if job.state == JobState.ACTIVE:
            return job
        if job.state != JobState.PAUSED:
            raise FailedPrecondition(
                f"job {job_id} is {job.state.value}; only a PAUSED job can be resumed"
            )
        now = utcnow()
        # runs that waited while the job was paused (one-off runs, retries, manual runs)
        # go back into the due index, due now
        parked = [
            dataclasses.replace(r, due_at=now)
            for r in await self.store.list_active_runs(job_id)
            if r.state == RunState.PENDING and r.due_at <= now
        ]
        reset = JobProgress(job_id=job_id, consecutive_failures=0)
        stored = await self._set_state(
            job, expected_version, JobState.ACTIVE, progress=reset, runs=parked
        )
        self._hint(parked)
        return stored

    async def delete_job(
        self, owner: str, job_id: str, expected_version: int = 0, cancel_running: bool = False
    ) -> Job:
        job = await self._load(owner, job_id, expected_version)
        if job.state == JobState.DELETED:
            return job
        exhausted = JobProgress(job_id=job_id, next_fire_key="")
        stored = await self._set_state(job, expected_version, JobState.DELETED, progress=exhausted)
        if cancel_running:
            self.link.cancel_job(job_id, RunReason.JOB_DELETED)
        return stored

    async def run_job_now(self, owner: str, job_id: str) -> Run:
        job = await self._load(owner, job_id, 0)
        if job.state not in (JobState.ACTIVE, JobState.COMPLETED):
            raise FailedPrecondition(f"job {job_id} is {job.state.value}; resume it first")
        now = utcnow()
        key = f"{MANUAL_PREFIX}{new_job_id()}"
        run = self._extra_run(job, key, now)
        await self.store.commit(runs=[run], due=[run])
        self._hint([run])
        return run

    def _extra_run(
        self,
        job: Job,
        fire_key: str,
        now: datetime,
        replayed_from: str = "",
        id_at: datetime | None = None,
    ) -> Run:
        return Run(
            id=run_id(job.id, fire_key, 1, id_at or now),
            job_id=job.id,
            owner=job.owner,
            fire_key=fire_key,
            fire_at=now,
            due_at=now,
            state=RunState.PENDING,
            priority=job.spec.priority,
            shard=shard_for(job.id, self.shard_count),
            created_at=now,
            replayed_from=replayed_from,
        )

    async def preview_fires(
        self, owner: str, source: str | Schedule, count: int, after: datetime | None
    ) -> list[Fire]:
        valid_count(count, "count", limits.MAX_PREVIEW_COUNT)
        time_bound(after, "after")
        if isinstance(source, str):
            schedule = (await self._load(owner, source, 0)).spec.schedule
        else:
            validate_schedule_bounds(source, "schedule")
            schedule = source
        now = after or utcnow()
        if schedule.kind == ScheduleKind.IMMEDIATE:
            return [Fire(key="now", at=now, local=now)]
        return preview(schedule, now, count or 10)

    # --- runs ---------------------------------------------------------------------

    async def list_runs(self, owner: str, job_id: str, **filters: object) -> Page[Run]:
        """Runs of one job, newest first; with no ``job_id``, of every job of the owner,
        by job id then newest first (``JobStore.list_owner_runs``: pages may be short)."""
        if job_id:
            identifier(job_id, "job_id")
            page = await self.store.list_runs(owner, job_id, **filters)  # type: ignore[arg-type]
        else:
            page = await self.store.list_owner_runs(owner, **filters)  # type: ignore[arg-type]
        return dataclasses.replace(page, items=await self._with_waiting_reasons(page.items))

    async def get_run(self, owner: str, run_id_: str) -> Run:
        run = await self.store.get_run(owner, identifier(run_id_, "run_id"))
        return (await self._with_waiting_reasons([run]))[0]

    async def wait_run(
        self, owner: str, run_id_: str, timeout: timedelta | None, cap: float | None = None
    ) -> Run:
        """The run once final, or as it stands when ``timeout`` (``run_waits.wait_seconds``)
        or ``cap`` seconds (what the caller's deadline leaves) have passed."""
        identifier(run_id_, "run_id")
        seconds = wait_seconds(timeout)
        if cap is not None:
            seconds = max(0.0, min(seconds, cap))
        run = await wait_final(
            run_id_,
            lambda: self.store.get_run(owner, run_id_),
            endings=self.endings,
            served_here=self.served_here,
            seconds=seconds,
        )
        return run if run.is_final else (await self._with_waiting_reasons([run]))[0]

    async def _with_waiting_reasons(self, runs: list[Run]) -> list[Run]:
        """Runs due and not yet leased, with why they wait as their pollers say: asked
        with a short timeout, and left without a reason if no answer comes."""
        now = utcnow()
        waiting = [r for r in runs if r.state == RunState.PENDING and r.due_at <= now]
        if not waiting:
            return runs
        try:
            reasons = await asyncio.wait_for(
                self.link.waiting_reasons(waiting), WAITING_REASON_WAIT
            )
        except (TimeoutError, ShardcronError):
            return runs
        return [
            dataclasses.replace(r, waiting_reason=reasons[r.id]) if r.id in reasons else r
            for r in runs
        ]

    async def overview(self, owner: str, window: OverviewWindow) -> Overview:
        """The owner's overview (``overviews.read_overview``)."""
        return await read_overview(self.link, self.store, owner, window, utcnow())

    async def cancel_run(self, owner: str, run_id_: str) -> Run:
        run = await self.get_run(owner, run_id_)
        if run.state.is_final:
            raise FailedPrecondition(f"run {run.id} is already {run.state.value}")
        return await self.link.cancel(run, RunReason.CANCELLED_BY_USER)

    async def list_dead_letters(self, owner: str, **filters: object) -> Page[Run]:
        optional_identifier(str(filters.get("job_id", "")), "job_id")
        return await self.store.list_dead_letters(owner, **filters)  # type: ignore[arg-type]

    async def _dead_letters(self, owner: str, run_ids: Sequence[str], job_id: str) -> list[Run]:
        if not run_ids and not job_id:
            raise InvalidArgument("run_ids", "name run ids or a job_id")
        if len(run_ids) > limits.MAX_RUN_IDS:
            raise InvalidArgument("run_ids", f"at most {limits.MAX_RUN_IDS} per call")
        for i, rid in enumerate(run_ids):
            identifier(rid, f"run_ids[{i}]")
        optional_identifier(job_id, "job_id")
        if run_ids:
            runs = [await self.store.get_run(owner, rid) for rid in run_ids]
            for i, run in enumerate(runs):
                if not run.dead_letter:
                    raise FailedPrecondition(f"run_ids[{i}]: run {run.id} is not a dead letter")
            return runs
        await self.store.get_job(owner, job_id)
        out: list[Run] = []
        token = ""
        while True:
            page = await self.store.list_dead_letters(
                owner, job_id=job_id, page_size=1000, page_token=token
            )
            out.extend(page.items)
            if not page.next_page_token:
                return out
            token = page.next_page_token

    async def replay_dead_letters(
        self, owner: str, run_ids: Sequence[str], job_id: str
    ) -> list[Run]:
        runs = await self._dead_letters(owner, run_ids, job_id)
        now = utcnow()
        jobs = await self.store.get_jobs(list({r.job_id for r in runs}))
        fresh: list[Run] = []
        for run in runs:
            job = jobs.get(run.job_id)
            if job is None or job.state == JobState.DELETED:
                raise FailedPrecondition(f"job {run.job_id} of run {run.id} is deleted")
            fresh.append(
                # one replay per dead run, with the same id however often it is asked
                # for: a replay whose dead letter was not cleared yet (a crash between
                # the two writes) writes the same run again instead of a second one
                self._extra_run(
                    job,
                    f"{REPLAY_PREFIX}{run.id}",
                    now,
                    replayed_from=run.id,
                    id_at=run.ended_at or run.due_at,
                )
            )
        cleared = [dataclasses.replace(r, dead_letter=False) for r in runs]
        await self.store.commit(runs=cleared + fresh, due=fresh)
        self._hint(fresh)
        return fresh

    async def drop_dead_letters(self, owner: str, run_ids: Sequence[str], job_id: str) -> int:
        runs = await self._dead_letters(owner, run_ids, job_id)
        await self.store.commit(runs=[dataclasses.replace(r, dead_letter=False) for r in runs])
        return len(runs)

    async def read_output(
        self, owner: str, run_id_: str, offset: int, limit: int | None = None
    ) -> tuple[Run, list[OutputChunk]]:
        """The owner's run and its output from ``offset`` (negative: from the end), at
        most about ``limit`` bytes (None: as much as one read gives): from the blob
        store's parts when the node has one (``output_blobs``), else the job store's tail."""
        if abs(offset) > limits.MAX_OUTPUT_OFFSET:
            raise InvalidArgument("offset", f"must be within ±{limits.MAX_OUTPUT_OFFSET}")
        run = await self.get_run(owner, run_id_)
        if self.output_blobs is not None:
            return run, await self.output_blobs.read(self.store, run, offset, limit)
        chunks = await self.store.read_output(run_id_, offset=offset)
        if limit is not None:
            chunks = _within(chunks, limit)
        return run, chunks

    async def read_result(
        self, owner: str, run_id_: str, name: str, offset: int, limit: int | None
    ) -> AsyncIterator[tuple[int, bytes]]:
        """The owner's run's result file ``name`` from ``offset``, at most ``limit`` bytes
        (None: to its end), from the node's blob store (``result_blobs``)."""
        run = await self.store.get_run(owner, identifier(run_id_, "run_id"))
        if self.output_blobs is None:
            raise FailedPrecondition("result files are not kept: this node has no blob store")
        async for piece in read_result(self.output_blobs.store, run, name, offset, limit):
            yield piece


def _within(chunks: list[OutputChunk], limit: int) -> list[OutputChunk]:
    """The first ``limit`` bytes of ``chunks``."""
    out: list[OutputChunk] = []
    for chunk in chunks:
        if limit <= 0:
            break
        if len(chunk.data) > limit:
            chunk = dataclasses.replace(chunk, data=chunk.data[:limit])
        out.append(chunk)
        limit -= len(chunk.data)
    return out

"""What happens to a fire when it comes due: the scheduling rules, as pure functions.

The poller calls these at a run's due time and writes what they return. Kept
free of I/O so every rule (misfire policies, DST skips, the schedule window,
retries with backoff) is tested without a clock or a store.

Every nominal fire of a recurring job ends with a record: a run, or a run in
state SKIPPED/MISSED with its reason. No fire passes silently: a user listing a
job's runs sees every fire its schedule had, and why one did not run.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from shardcron.client.saturating import saturating_add, saturating_seconds
from shardcron.client.schedule import iter_fires, jitter_delay, next_fire
from shardcron.client.types import (
    Fire,
    Job,
    LateReason,
    MisfirePolicy,
    Run,
    RunLateness,
    RunReason,
    RunState,
    Schedule,
    ScheduleKind,
)
from shardcron.coordinator.ids import run_id, shard_for

# An overdue fire within this much of its due time is on time, not a misfire.
MISFIRE_GRACE = timedelta(seconds=5)
# RUN_ALL backfills at most this many fires; the rest are SKIPPED (MISFIRE).
MAX_BACKFILL = 100
# At most this many SKIPPED records are written for one catch-up; the rest are counted.
MAX_SKIP_RECORDS = 1000
# A run lost with its worker is tried again at least this many times in all, unless
# it is a scheduled fire of a recurring job (its next fire comes anyway).
WORKER_LOST_ATTEMPTS = 3
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_last_immediate = (_EPOCH, Fire(key=f"now:{_EPOCH.isoformat()}", at=_EPOCH, local=_EPOCH))


@dataclass(slots=True)
class FireOutcome:
    """The writes a due fire leads to."""

    runs: list[Run] = field(default_factory=list)  # new or changed runs (skips included)
    due: list[Run] = field(default_factory=list)  # new PENDING runs to index
    next_fire: Fire | None = None  # the job's next fire after this one (None = exhausted)
    skipped: dict[RunReason, int] = field(default_factory=dict)  # fires skipped by reason
    run_this: bool = True  # False: the fire itself was skipped (its record is in runs)


def make_run(job: Job, fire: Fire, *, shard_count: int, now: datetime, attempt: int = 1) -> Run:
    """The first attempt of a scheduled fire, due at the fire time plus the job's jitter."""
    jitter = job.spec.schedule.jitter
    due = saturating_add(fire.at, jitter_delay(job.id, fire.key, jitter)) if jitter else fire.at
    return Run(
        id=run_id(job.id, fire.key, attempt, due),
        job_id=job.id,
        owner=job.owner,
        fire_key=fire.key,
        fire_at=fire.at,
        due_at=due,
        state=RunState.PENDING,
        attempt=attempt,
        priority=job.spec.priority,
        shard=shard_for(job.id, shard_count),
        created_at=now,
        schedule_version=job.schedule_version,
    )


MANUAL_PREFIX = "manual:"
REPLAY_PREFIX = "replay:"


def is_extra_run(run: Run) -> bool:
    """A run started by hand (RunJobNow) or replaying a dead letter: not a fire of the schedule."""
    return run.fire_key.startswith((MANUAL_PREFIX, REPLAY_PREFIX))


def skipped_run(
    job: Job,
    fire: Fire,
    reason: RunReason,
    *,
    shard_count: int,
    now: datetime,
    lateness: RunLateness | None = None,
) -> Run:
    base = make_run(job, fire, shard_count=shard_count, now=now)
    state = RunState.MISSED if reason == RunReason.DEADLINE else RunState.SKIPPED
    return dataclasses.replace(base, state=state, reason=reason, ended_at=now, lateness=lateness)


def skip_lateness(
    job: Job, reason: RunReason, fire_at: datetime, now: datetime
) -> RunLateness | None:
    """Why a fire its rules skip did not run, in words (``coordinator.poller.lateness``):
    paused, or dropped by the misfire policy that many seconds after its time; None
    for a skip of another kind (a DST gap is no lateness)."""
    if reason == RunReason.PAUSED:
        return RunLateness(reason=LateReason.PAUSED, text="paused")
    if reason != RunReason.MISFIRE:
        return None
    late = (now - fire_at).total_seconds()
    policy = job.spec.misfire.value
    return RunLateness(
        reason=LateReason.MISFIRE,
        text=f"misfire policy {policy}: came due {late:.1f} s after its fire time",
        waited=max(timedelta(0), now - fire_at),
    )


def skip_records(job: Job, skipped: list[Fire], *, shard_count: int, now: datetime) -> list[Run]:
    """The records of fires skipped for their own reasons (DST), as ``first_fires`` and
    ``_runnable_after`` list them."""
    return [skipped_run(job, f, f.skip_reason, shard_count=shard_count, now=now) for f in skipped]


def first_fire(job: Job, *, now: datetime, shard_count: int) -> tuple[Fire | None, list[Run]]:
    """The first fire of a new (or rescheduled) job, and SKIPPED records for DST-skipped fires before it."""
    fire, skipped = first_fires(job.spec.schedule, now)
    return fire, skip_records(job, skipped, shard_count=shard_count, now=now)


def first_fires(schedule: Schedule, now: datetime) -> tuple[Fire | None, list[Fire]]:
    """``first_fire`` of a schedule alone (the fires, not the job's runs): the first fire,
    and the DST-skipped fires before it that get a record (``MAX_SKIP_RECORDS`` at most)."""
    if schedule.kind == ScheduleKind.IMMEDIATE:
        return _immediate_fire(now), []
    if schedule.kind == ScheduleKind.AT:
        at = schedule.at
        assert at is not None
        if schedule.end_at is not None and at > schedule.end_at:
            return None, []
        return Fire(key=at.isoformat(), at=at, local=at), []
    return _runnable_after(schedule, now - timedelta(microseconds=1))


def _immediate_fire(now: datetime) -> Fire:
    """The one fire of an immediate job made at ``now``. The jobs of a batch create are
    made with one ``now`` object, so the last fire is kept and given again for that very
    object (not an equal one: an equal time in another zone has another key)."""
    global _last_immediate
    if _last_immediate[0] is not now:
        _last_immediate = (now, Fire(key=f"now:{now.isoformat()}", at=now, local=now))
    return _last_immediate[1]


def _next_runnable(
    job: Job, *, after: datetime, now: datetime, shard_count: int
) -> tuple[Fire | None, list[Run]]:
    fire, skipped = _runnable_after(job.spec.schedule, after)
    return fire, skip_records(job, skipped, shard_count=shard_count, now=now)


def _runnable_after(schedule: Schedule, after: datetime) -> tuple[Fire | None, list[Fire]]:
    """The first fire after ``after`` that is not skipped, and the skipped ones before it
    that get a record (``MAX_SKIP_RECORDS`` at most)."""
    first = next_fire(schedule, after)  # remembered: shared by a fleet
    if first is None or first.skip_reason == RunReason.NONE:
        return first, []
    skipped: list[Fire] = []
    for fire in iter_fires(schedule, after):
        if fire.skip_reason == RunReason.NONE:
            return fire, skipped
        if len(skipped) < MAX_SKIP_RECORDS:
            skipped.append(fire)
    return None, skipped


def on_fire_due(
    job: Job,
    run: Run,
    *,
    now: datetime,
    shard_count: int,
    paused: bool,
    grace: timedelta = MISFIRE_GRACE,
) -> FireOutcome:
    """A scheduled fire of a recurring job is due: apply the misfire policy,
    record the fires it passed over, and materialise the next one.

    A fire more than ``grace`` past its time is a misfire."""
    out = FireOutcome()
    spec = job.spec
    overdue: list[Fire] = []
    last_seen = run.fire_at
    if now - run.fire_at > grace:
        for fire in iter_fires(spec.schedule, run.fire_at):
            if now - fire.at <= grace:
                break
            overdue.append(fire)
            last_seen = fire.at
            if len(overdue) > MAX_SKIP_RECORDS:
                # far behind: jump to the present and count the rest
                horizon = saturating_add(now, -grace)
                jumped = sum(1 for _ in _take_until(spec.schedule, fire.at, horizon))
                out.skipped[RunReason.MISFIRE] = out.skipped.get(RunReason.MISFIRE, 0) + jumped
                nf = next_fire(spec.schedule, horizon)
                last_seen = horizon if nf is None else nf.at - timedelta(microseconds=1)
                break

    this_overdue = now - run.due_at > grace
    if paused:
        _skip(out, job, [run], RunReason.PAUSED, now)
        _skip_fires(out, job, overdue, RunReason.PAUSED, now, shard_count)
    elif spec.misfire == MisfirePolicy.SKIP:
        if this_overdue:
            _skip(out, job, [run], RunReason.MISFIRE, now)
        _skip_fires(out, job, overdue, RunReason.MISFIRE, now, shard_count)
    elif spec.misfire == MisfirePolicy.RUN_ALL:
        backfill, rest = overdue[:MAX_BACKFILL], overdue[MAX_BACKFILL:]
        for fire in backfill:
            if fire.skip_reason != RunReason.NONE:
                _skip_fires(out, job, [fire], fire.skip_reason, now, shard_count)
                continue
            new = make_run(job, fire, shard_count=shard_count, now=now)
            out.runs.append(new)
            out.due.append(new)
        _skip_fires(out, job, rest, RunReason.MISFIRE, now, shard_count)
    else:  # RUN_ONCE: this run is the one catch-up run
        _skip_fires(out, job, overdue, RunReason.MISFIRE, now, shard_count)

    fire, dst_skips = _next_runnable(job, after=last_seen, now=now, shard_count=shard_count)
    for skip in dst_skips:
        out.runs.append(skip)
        out.skipped[skip.reason] = out.skipped.get(skip.reason, 0) + 1
    out.next_fire = fire
    if fire is not None:
        new = make_run(job, fire, shard_count=shard_count, now=now)
        out.runs.append(new)
        out.due.append(new)
    return out


def _take_until(
    schedule: Schedule, after: datetime, until: datetime, cap: int = 1_000_000
) -> Iterator[Fire]:
    for i, fire in enumerate(iter_fires(schedule, after)):
        if fire.at > until or i >= cap:
            return
        yield fire


def _skip(out: FireOutcome, job: Job, runs: list[Run], reason: RunReason, now: datetime) -> None:
    for r in runs:
        late = skip_lateness(job, reason, r.fire_at, now)
        out.runs.append(
            dataclasses.replace(
                r, state=RunState.SKIPPED, reason=reason, ended_at=now, lateness=late
            )
        )
        out.skipped[reason] = out.skipped.get(reason, 0) + 1
        out.run_this = False


def _skip_fires(
    out: FireOutcome,
    job: Job,
    fires: list[Fire],
    reason: RunReason,
    now: datetime,
    shard_count: int,
) -> None:
    for i, fire in enumerate(fires):
        why = fire.skip_reason if fire.skip_reason != RunReason.NONE else reason
        out.skipped[why] = out.skipped.get(why, 0) + 1
        if i < MAX_SKIP_RECORDS:
            late = skip_lateness(job, why, fire.at, now)
            out.runs.append(
                skipped_run(job, fire, why, shard_count=shard_count, now=now, lateness=late)
            )


def is_scheduled_fire(job: Job, run: Run) -> bool:
    """The run is an attempt at a fire of a recurring job's schedule (not a manual run
    or a replay): a later fire of the same schedule makes it late."""
    return job.spec.schedule.recurring and run.schedule_version > 0 and not is_extra_run(run)


def retry_misfired(job: Job, run: Run, *, now: datetime, grace: timedelta = MISFIRE_GRACE) -> bool:
    """A retry (attempt 2 or later) of a scheduled fire comes due: it is dropped
    (SKIPPED, MISFIRE) when a later fire of the job has come due by ``now`` — a retry
    never runs after a later fire of its job — or, under misfire policy SKIP, when it
    is more than ``grace`` late itself (the cluster was down or saturated)."""
    if run.attempt <= 1 or not is_scheduled_fire(job, run):
        return False
    if job.spec.misfire == MisfirePolicy.SKIP and now - run.due_at > grace:
        return True
    later = next_fire(job.spec.schedule, run.fire_at)
    return later is not None and later.at <= now


def retry_run(job: Job, failed: Run, *, now: datetime) -> Run | None:
    """The next attempt of a failed run, or None when its attempts are used up. A run
    lost with its worker may be tried ``WORKER_LOST_ATTEMPTS`` times whatever the
    policy (it may never have run), except a scheduled fire of a recurring job, which
    gets the attempts its policy allows: a job allowing 1 attempt runs no attempt 2."""
    allowed = job.spec.retry.max_attempts
    if failed.reason == RunReason.WORKER_LOST and not is_scheduled_fire(job, failed):
        allowed = max(allowed, WORKER_LOST_ATTEMPTS)
    if failed.attempt >= allowed or failed.state not in (RunState.FAILED, RunState.TIMED_OUT):
        return None
    policy = job.spec.retry
    delay = policy.backoff(failed.attempt)
    if policy.jitter > 0:
        digest = hashlib.blake2b(f"{failed.id}".encode(), digest_size=4).digest()
        fraction = int.from_bytes(digest, "big") / 2**32
        extra = saturating_seconds(delay.total_seconds() * policy.jitter * fraction)
        delay += min(extra, timedelta.max - delay)
    due = saturating_add(now, delay)
    attempt = failed.attempt + 1
    return dataclasses.replace(
        failed,
        # from the failed run alone, not from now: a poller taking the shard over and
        # deciding the same retry again writes the same run, not a second one
        id=run_id(job.id, failed.fire_key, attempt, saturating_add(failed.due_at, delay)),
        due_at=due,
        state=RunState.PENDING,
        attempt=attempt,
        worker_id="",
        lease_token=0,
        lease_expires_at=None,
        created_at=now,
        started_at=None,
        ended_at=None,
        exit_code=None,
        reason=RunReason.NONE,
        error="",
        output_bytes=0,
        dead_letter=False,
        usage=None,
        lateness=None,
    )

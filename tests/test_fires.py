"""The rules a due fire goes through (coordinator/poller/fires.py), without clock or store."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from shardcron.client.saturating import (
    FAR_FUTURE,
    FAR_PAST,
    saturating_add,
    saturating_seconds,
)
from shardcron.client.types import (
    CommandTask,
    DstGap,
    Job,
    JobSpec,
    JobState,
    MisfirePolicy,
    RetryPolicy,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.coordinator.ids import run_id
from shardcron.coordinator.poller.fires import (
    MAX_BACKFILL,
    WORKER_LOST_ATTEMPTS,
    first_fire,
    first_fires,
    make_run,
    on_fire_due,
    retry_misfired,
    retry_run,
)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
MINUTELY = Schedule.cron_expr("* * * * *")


def job(schedule: Schedule = MINUTELY, **spec: object) -> Job:
    return Job(
        id="01a214ec-bebd-737a-9372-2cb5480e4a39",
        owner="o",
        spec=JobSpec(name="j", task=CommandTask(argv=("true",)), schedule=schedule, **spec),  # type: ignore[arg-type]
        state=JobState.ACTIVE,
        version=1,
        created_at=T0,
        updated_at=T0,
    )


def pending_fire(j: Job, at: datetime):  # type: ignore[no-untyped-def]
    fire, skips = first_fire(j, now=at - timedelta(seconds=1), shard_count=8)
    assert fire is not None and not skips
    return make_run(j, fire, shard_count=8, now=at)


def test_on_time_fire_materialises_exactly_the_next_one() -> None:
    j = job()
    run = pending_fire(j, T0)
    out = on_fire_due(j, run, now=T0, shard_count=8, paused=False)
    assert out.run_this
    assert out.next_fire is not None and out.next_fire.at == T0 + timedelta(minutes=1)
    assert [r.fire_at for r in out.due] == [T0 + timedelta(minutes=1)]
    assert out.skipped == {}


def test_run_once_runs_one_catch_up_and_records_the_rest_skipped() -> None:
    j = job(misfire=MisfirePolicy.RUN_ONCE)
    run = pending_fire(j, T0)
    now = T0 + timedelta(minutes=10, seconds=30)
    out = on_fire_due(j, run, now=now, shard_count=8, paused=False)
    assert out.run_this
    skipped = [r for r in out.runs if r.state == RunState.SKIPPED]
    assert len(skipped) == 10 and all(r.reason == RunReason.MISFIRE for r in skipped)
    assert out.next_fire is not None and out.next_fire.at == T0 + timedelta(minutes=11)


def test_skip_policy_skips_the_overdue_fire_itself_too() -> None:
    j = job(misfire=MisfirePolicy.SKIP)
    run = pending_fire(j, T0)
    out = on_fire_due(
        j, run, now=T0 + timedelta(minutes=3, seconds=30), shard_count=8, paused=False
    )
    assert not out.run_this
    assert sum(1 for r in out.runs if r.state == RunState.SKIPPED) == 4
    assert out.skipped == {RunReason.MISFIRE: 4}


def test_run_all_backfills_within_its_bound() -> None:
    j = job(misfire=MisfirePolicy.RUN_ALL)
    run = pending_fire(j, T0)
    out = on_fire_due(
        j, run, now=T0 + timedelta(minutes=MAX_BACKFILL + 20), shard_count=8, paused=False
    )
    backfill = [r for r in out.due if r.fire_at < T0 + timedelta(minutes=MAX_BACKFILL + 19)]
    assert len(backfill) == MAX_BACKFILL
    assert out.skipped[RunReason.MISFIRE] >= 18


def test_a_fire_within_the_grace_is_on_time() -> None:
    j = job(misfire=MisfirePolicy.SKIP)
    run = pending_fire(j, T0)
    out = on_fire_due(j, run, now=T0 + timedelta(seconds=4), shard_count=8, paused=False)
    assert out.run_this and out.skipped == {}


def test_paused_job_records_the_fire_skipped_and_keeps_its_schedule() -> None:
    j = job()
    run = pending_fire(j, T0)
    out = on_fire_due(j, run, now=T0, shard_count=8, paused=True)
    assert not out.run_this
    [skip] = [r for r in out.runs if r.id == run.id]
    assert (skip.state, skip.reason) == (RunState.SKIPPED, RunReason.PAUSED)
    assert out.next_fire is not None


def test_dst_gap_skip_is_recorded_and_the_chain_goes_on() -> None:
    s = Schedule.cron_expr("30 2 * * *", timezone="Europe/Berlin", dst_gap=DstGap.SKIP)
    j = job(s)
    night_before = datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET on the 28th
    run = pending_fire(j, night_before)
    out = on_fire_due(j, run, now=night_before, shard_count=8, paused=False)
    [gap] = [r for r in out.runs if r.reason == RunReason.DST_GAP]
    assert gap.state == RunState.SKIPPED and gap.fire_key.startswith("2026-03-29T02:30")
    assert out.next_fire is not None and out.next_fire.key.startswith("2026-03-30T02:30")


def test_a_job_made_inside_a_dst_gap_records_the_skip_before_its_first_fire() -> None:
    s = Schedule.cron_expr("30 2 * * *", timezone="Europe/Berlin", dst_gap=DstGap.SKIP)
    j = job(s)
    made = datetime(2026, 3, 29, 0, 45, tzinfo=UTC)  # 01:45 CET, the gap's night
    fire, skipped = first_fires(s, made)
    assert fire is not None and fire.key.startswith("2026-03-30T02:30")
    assert [f.key[:16] for f in skipped] == ["2026-03-29T02:30"]
    same_fire, skips = first_fire(j, now=made, shard_count=8)
    assert same_fire == fire
    [skip] = skips
    assert (skip.state, skip.reason, skip.fire_key) == (
        RunState.SKIPPED,
        RunReason.DST_GAP,
        skipped[0].key,
    )


def test_materialising_a_fire_twice_gives_the_same_run_id() -> None:
    j = job()
    run = pending_fire(j, T0)
    a = on_fire_due(j, run, now=T0, shard_count=8, paused=False)
    b = on_fire_due(j, run, now=T0 + timedelta(milliseconds=3), shard_count=8, paused=False)
    assert [r.id for r in a.due] == [r.id for r in b.due]


def test_retry_backs_off_and_stops_at_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff=timedelta(seconds=2), multiplier=3)
    j = job(Schedule.immediate(), retry=policy)
    first = make_run(j, first_fire(j, now=T0, shard_count=8)[0], shard_count=8, now=T0)  # type: ignore[arg-type]
    failed = replace(first, state=RunState.FAILED, reason=RunReason.NON_ZERO_EXIT)
    second = retry_run(j, failed, now=T0)
    assert second is not None and second.attempt == 2 and second.due_at == T0 + timedelta(seconds=2)
    assert second.id == run_id(j.id, first.fire_key, 2, second.due_at)
    # decided again later (a poller that took the shard over): the same run, due later
    again = retry_run(j, failed, now=T0 + timedelta(seconds=5))
    assert again is not None and again.id == second.id and again.due_at > second.due_at
    failed2 = replace(second, state=RunState.FAILED)
    third = retry_run(j, failed2, now=T0)
    assert third is not None and third.due_at == T0 + timedelta(seconds=6)
    failed3 = replace(third, state=RunState.TIMED_OUT)
    assert retry_run(j, failed3, now=T0) is None


def test_a_retry_of_a_job_stored_before_the_bounds_saturates_instead_of_raising() -> None:
    """Issue 10, item 1 (b): a backoff of ten thousand years, a multiplier of 1e300 or a
    jitter of 1e300 (stored before validation bounded them) gave OverflowError."""
    forever = timedelta(seconds=315576000000)
    for policy in (
        RetryPolicy(max_attempts=3, initial_backoff=forever, max_backoff=forever),
        RetryPolicy(max_attempts=3, multiplier=1e300, max_backoff=forever),
        RetryPolicy(max_attempts=3, initial_backoff=forever, max_backoff=forever, jitter=1e300),
    ):
        j = job(Schedule.immediate(), retry=policy)
        first = make_run(j, first_fire(j, now=T0, shard_count=8)[0], shard_count=8, now=T0)  # type: ignore[arg-type]
        failed = replace(first, state=RunState.FAILED, attempt=2)
        retry = retry_run(j, failed, now=T0)
        assert retry is not None and retry.due_at == FAR_FUTURE


def test_a_jitter_stored_before_the_bounds_saturates_the_due_time() -> None:
    at = datetime(8999, 12, 31, tzinfo=UTC)
    j = job(replace(Schedule.once_at(at), jitter=timedelta(days=10**8)))
    fire = first_fire(j, now=T0, shard_count=8)[0]
    assert fire is not None
    assert make_run(j, fire, shard_count=8, now=T0).due_at <= FAR_FUTURE


def test_saturating_add_holds_within_the_far_bounds() -> None:
    assert saturating_add(T0, timedelta.max) == FAR_FUTURE
    assert saturating_add(T0, timedelta.min) == FAR_PAST
    assert saturating_add(T0, timedelta(seconds=1)) == T0 + timedelta(seconds=1)
    beyond = datetime.max.replace(tzinfo=UTC)  # stored beyond the far future: never earlier
    assert saturating_add(beyond, timedelta(days=1)) == beyond
    assert saturating_seconds(float("nan")) == timedelta(0)
    assert saturating_seconds(1e300) == timedelta.max


def test_a_lost_worker_is_retried_even_without_a_retry_policy() -> None:
    j = job(Schedule.immediate())
    run = make_run(j, first_fire(j, now=T0, shard_count=8)[0], shard_count=8, now=T0)  # type: ignore[arg-type]
    lost = replace(run, state=RunState.FAILED, reason=RunReason.WORKER_LOST)
    attempts = [lost]
    while (nxt := retry_run(j, attempts[-1], now=T0)) is not None:
        attempts.append(replace(nxt, state=RunState.FAILED, reason=RunReason.WORKER_LOST))
    assert len(attempts) == WORKER_LOST_ATTEMPTS
    cancelled = replace(run, state=RunState.CANCELLED)
    assert retry_run(j, cancelled, now=T0) is None


def lost(run):  # type: ignore[no-untyped-def]
    return replace(run, state=RunState.FAILED, reason=RunReason.WORKER_LOST)


def test_a_lost_fire_of_a_job_allowing_one_attempt_is_not_run_as_attempt_2() -> None:
    """Found on a three-node cluster: a cron fire whose worker was taken for lost (its
    result refused after a shard move) ran again as attempt 2, although the job
    allows 1 attempt. A scheduled fire gets the attempts its job allows; one-off runs
    keep the extra attempts of a lost worker (above)."""
    j = job(retry=RetryPolicy(max_attempts=1))
    run = pending_fire(j, T0)
    assert retry_run(j, lost(run), now=T0) is None
    j3 = job(retry=RetryPolicy(max_attempts=3))
    second = retry_run(j3, lost(pending_fire(j3, T0)), now=T0)
    assert second is not None and second.attempt == 2


def test_a_retried_fire_never_runs_after_a_later_fire_of_its_job() -> None:
    """Found on a three-node cluster: the :25 fire, lost with its worker, was run again
    as attempt 2 at :42, after the :42 fire. A retry whose job's next fire has come
    due is dropped (SKIPPED, MISFIRE), whatever the misfire policy."""
    for policy in MisfirePolicy:
        j = job(misfire=policy, retry=RetryPolicy(max_attempts=3))
        retry = retry_run(j, lost(pending_fire(j, T0)), now=T0 + timedelta(seconds=5))
        assert retry is not None
        before_next = T0 + timedelta(seconds=59)
        assert not retry_misfired(j, retry, now=before_next, grace=timedelta(minutes=5))
        at_next = T0 + timedelta(minutes=1)  # the next fire is due: now == its time
        assert retry_misfired(j, retry, now=at_next, grace=timedelta(minutes=5)), policy


def test_a_retried_fire_follows_misfire_skip_when_it_comes_due_late() -> None:
    j = job(
        Schedule.cron_expr("0 * * * *"),
        misfire=MisfirePolicy.SKIP,
        retry=RetryPolicy(max_attempts=3),
    )
    retry = retry_run(j, lost(pending_fire(j, T0)), now=T0)
    assert retry is not None
    grace = timedelta(seconds=5)
    assert not retry_misfired(j, retry, now=retry.due_at + grace, grace=grace)
    assert retry_misfired(j, retry, now=retry.due_at + 2 * grace, grace=grace)
    catch_up = replace(j, spec=j.spec.replace(misfire=MisfirePolicy.RUN_ONCE))
    assert not retry_misfired(catch_up, retry, now=retry.due_at + 2 * grace, grace=grace)


def test_only_retries_of_scheduled_fires_can_misfire() -> None:
    j = job(retry=RetryPolicy(max_attempts=3))
    first = pending_fire(j, T0)
    late = T0 + timedelta(hours=1)
    assert not retry_misfired(j, first, now=late)  # attempt 1: the fire rules decide
    manual = replace(first, fire_key="manual:x", attempt=2)
    assert not retry_misfired(j, manual, now=late)
    one_off = job(Schedule.immediate(), retry=RetryPolicy(max_attempts=3))
    assert not retry_misfired(one_off, replace(first, attempt=2), now=late)

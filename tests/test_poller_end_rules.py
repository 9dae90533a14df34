"""What a run's end leads to (coordinator/poller/end_rules.py), and a fire's own end as
the poller's rules apply it, with hand-set times."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from shardcron.client.schedule import next_fire
from shardcron.client.types import (
    HandlerTask,
    Job,
    JobSpec,
    JobState,
    NotifyPolicy,
    NotifyRule,
    RetryPolicy,
    Run,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.coordinator.poller import fires
from shardcron.coordinator.poller.end_rules import Outcome, final_run, follow_up
from tests.support.held_runs import Held

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def job(schedule: Schedule | None = None, **spec: object) -> Job:
    return Job(
        id="01a214ec-bebd-737a-9372-2cb5480e4a39",
        owner="o",
        spec=JobSpec(
            name="j",
            task=HandlerTask(name="noop"),
            schedule=schedule or Schedule.cron_expr("* * * * *"),
            **spec,  # type: ignore[arg-type]
        ),
        state=JobState.ACTIVE,
        version=1,
        created_at=T0,
        updated_at=T0,
        next_fire_at=T0 + timedelta(minutes=1),
        next_fire_key="k",
    )


def ended(j: Job, state: RunState, reason: RunReason = RunReason.NONE, attempt: int = 1) -> Run:
    run = Run(
        id=f"r{attempt}",
        job_id=j.id,
        owner="o",
        fire_key="f",
        fire_at=T0,
        due_at=T0,
        state=RunState.RUNNING,
        attempt=attempt,
        output_bytes=10,
    )
    return final_run(run, state, reason, T0 + timedelta(seconds=5), output_bytes=5)


def test_the_final_record_adds_the_output_received_and_ends_now() -> None:
    run = ended(job(), RunState.SUCCEEDED)
    assert (run.ended_at, run.output_bytes, run.state) == (
        T0 + timedelta(seconds=5),
        15,
        RunState.SUCCEEDED,
    )


def test_the_final_record_keeps_the_leases_last_expiry_when_one_is_given() -> None:
    run = Run(
        id="r", job_id="j", owner="o", fire_key="f", fire_at=T0, due_at=T0,
        state=RunState.RUNNING, lease_expires_at=T0 + timedelta(seconds=30),
    )  # fmt: skip
    later = T0 + timedelta(seconds=31)
    assert final_run(run, RunState.SUCCEEDED, RunReason.NONE, T0).lease_expires_at == (
        T0 + timedelta(seconds=30)
    )
    kept = final_run(run, RunState.SUCCEEDED, RunReason.NONE, T0, lease_expires_at=later)
    assert kept.lease_expires_at == later


def test_a_failure_with_attempts_left_is_retried_after_its_backoff_from_now() -> None:
    j = job(retry=RetryPolicy(max_attempts=3, initial_backoff=timedelta(seconds=7)))
    now = T0 + timedelta(seconds=9)
    out = follow_up(j, ended(j, RunState.FAILED), now, current=j, runs_left=1)
    assert out.retry is not None and out.retry.due_at == now + timedelta(seconds=7)
    assert out.retry.attempt == 2 and out.retry.state == RunState.PENDING
    assert not out.final.dead_letter and out.progress == {}, "a retried failure counts"


def test_the_last_failed_attempt_is_a_dead_letter_and_counts_in_the_streak() -> None:
    j = job(retry=RetryPolicy(max_attempts=2))
    out = follow_up(j, ended(j, RunState.TIMED_OUT, attempt=2), T0, current=j, runs_left=1)
    assert out.retry is None and out.final.dead_letter
    assert out.progress == {"consecutive_failures": 1}
    assert out.job is not None and out.job.consecutive_failures == 1


def test_a_job_is_paused_when_its_streak_reaches_the_limit() -> None:
    j = job(pause_after_failures=3, retry=RetryPolicy(max_attempts=1))
    current = dataclasses.replace(j, consecutive_failures=2)
    out = follow_up(
        j, ended(j, RunState.FAILED, RunReason.NON_ZERO_EXIT), T0, current=current, runs_left=1
    )
    assert out.job is not None and out.job.state == JobState.PAUSED
    assert out.progress["state"] == JobState.PAUSED and out.progress["consecutive_failures"] == 3


def test_a_success_resets_the_streak_and_a_cancel_leaves_it() -> None:
    j = dataclasses.replace(job(), consecutive_failures=2)
    assert follow_up(j, ended(j, RunState.SUCCEEDED), T0, current=j, runs_left=1).progress == {
        "consecutive_failures": 0
    }
    assert follow_up(j, ended(j, RunState.CANCELLED), T0, current=j, runs_left=1).progress == {}


def test_a_retry_dropped_for_a_later_fire_counts_in_the_streak_regression() -> None:
    """A per-second cron failing with retries: each retry is dropped (SKIPPED, MISFIRE)
    as the next fire comes due first, so no attempt ever ran out and the job was never
    paused after its failures."""
    j = job(pause_after_failures=2)
    current = dataclasses.replace(j, consecutive_failures=1)
    dropped = ended(j, RunState.SKIPPED, RunReason.MISFIRE, attempt=2)
    out = follow_up(j, dropped, T0, current=current, runs_left=1)
    assert out.progress["consecutive_failures"] == 2 and out.progress["state"] == JobState.PAUSED
    fresh_skip = ended(j, RunState.SKIPPED, RunReason.MISFIRE, attempt=1)
    assert follow_up(j, fresh_skip, T0, current=current, runs_left=1).progress == {}


def test_a_one_off_job_completes_with_its_run() -> None:
    j = job(Schedule.immediate())
    out = follow_up(j, ended(j, RunState.SUCCEEDED), T0, current=j, runs_left=0)
    assert out.job is not None and out.job.state == JobState.COMPLETED


def test_an_exhausted_schedule_completes_once_no_run_of_it_is_left() -> None:
    j = dataclasses.replace(job(), next_fire_at=None, next_fire_key="")
    assert (
        "state"
        not in follow_up(j, ended(j, RunState.SUCCEEDED), T0, current=j, runs_left=1).progress
    )
    out = follow_up(j, ended(j, RunState.SUCCEEDED), T0, current=j, runs_left=0)
    assert out.progress.get("state") == JobState.COMPLETED


def test_a_deleted_jobs_failure_is_neither_retried_nor_a_dead_letter() -> None:
    j = dataclasses.replace(job(retry=RetryPolicy(max_attempts=5)), state=JobState.DELETED)
    out = follow_up(j, ended(j, RunState.FAILED), T0, current=j, runs_left=0)
    assert out.retry is None and not out.final.dead_letter


# --- a fire's own end ---------------------------------------------------------------


def test_the_copy_of_a_job_whose_last_fire_was_skipped_is_not_kept_regression() -> None:
    """Issue 33, probe 1: the last fire of an exhausted schedule, skipped by its rules
    (its job paused), left its job's copy held with no run of it, for good."""
    schedule = Schedule.cron_expr("* * * * *", end_at=T0)
    fire = next_fire(schedule, T0 - timedelta(microseconds=1))
    assert fire is not None and fire.at == T0
    paused = dataclasses.replace(
        job(schedule),
        state=JobState.PAUSED,
        schedule_version=1,
        next_fire_at=fire.at,
        next_fire_key=fire.key,
    )
    h = Held()
    slot = h.due(fires.make_run(paused, fire, shard_count=8, now=T0), paused)
    h.table.cache_job(paused)
    h.due_rules.trigger(slot, T0, h.turn)
    assert (h.ended(slot).state, h.ended(slot).reason) == (RunState.SKIPPED, RunReason.PAUSED)
    assert h.table.jobs == {}
    h.table.check()


def _notifying(**rules: object) -> Job:
    policy = NotifyPolicy(webhook_url="https://hooks.example/x", **rules)  # type: ignore[arg-type]
    return job(
        Schedule.every(timedelta(minutes=1)), notify=policy, retry=RetryPolicy(max_attempts=1)
    )


def test_a_runs_end_puts_its_deliveries_in_the_turn_with_the_streak_it_made() -> None:
    h = Held()
    j = _notifying(on_failure=True, on_consecutive_failures=2, on_recovery=True)
    # held together, and a fourth after them (the next fire): the job stays held
    first, second, third, _ = (h.slot(j) for _ in range(4))
    failed = Outcome(state=RunState.FAILED, reason=RunReason.NON_ZERO_EXIT)
    h.ends.end(first, failed, h.turn, T0)
    assert [d.rule for d in h.turn.deliveries] == [NotifyRule.FAILURE]
    h.ends.end(second, failed, h.turn, T0)
    assert [d.rule for d in h.turn.deliveries[1:]] == [
        NotifyRule.FAILURE,
        NotifyRule.CONSECUTIVE_FAILURES,
    ]
    h.ends.end(third, Outcome(state=RunState.SUCCEEDED, reason=RunReason.NONE), h.turn, T0)
    assert h.turn.deliveries[-1].rule == NotifyRule.RECOVERY
    assert "after 2 failed runs" in h.turn.deliveries[-1].reason
    assert not h.turn.empty()


def test_an_owners_defaults_notify_a_job_without_rules_and_a_raising_rule_fails_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Held()
    defaults = NotifyPolicy(webhook_url="https://hooks.example/o", on_failure=True)
    h.ends._owner_defaults = {"o": defaults}.get  # the node's OwnerSettingsBook.defaults
    plain = job(retry=RetryPolicy(max_attempts=1))
    failed = Outcome(state=RunState.FAILED, reason=RunReason.NON_ZERO_EXIT)
    h.ends.end(h.slot(plain), failed, h.turn, T0)
    [d] = h.turn.deliveries
    assert d.webhook_url == defaults.webhook_url and d.rule == NotifyRule.FAILURE

    def broken(*args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("rules broke")

    monkeypatch.setattr("shardcron.coordinator.poller.ends.decide", broken)
    slot = h.slot(plain)
    h.ends.end(slot, failed, h.turn, T0)
    assert h.ended(slot).state == RunState.FAILED  # the run's end stands
    assert len(h.turn.deliveries) == 1
    h.table.check()

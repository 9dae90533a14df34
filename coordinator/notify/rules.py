"""Which notifications a run's end makes: pure functions of the job, the run's final
record and the job's failure streak before and after it (``decide``), and the exact
body each one sends (``body``).

The rules of a job's ``NotifyPolicy`` (docs/notifications.md):

- ``on_failure``: every run that ends FAILED or TIMED_OUT, retried or not;
- ``on_dead_letter``: a run that failed with no attempt left;
- ``on_consecutive_failures`` N: the run whose end brought the failure streak to N
  (once per streak: the streak starts again at a success);
- ``on_recovery``: a SUCCEEDED run that ended a streak of failures;
- ``on_late`` X: a run that started more than X after it was due, told of at its start
  (``decide_start``; at its end when its start was not reported apart from its result);
- ``on_missed``: a run that ended MISSED or SKIPPED, with its reason.

A delivery's id is the run's id and the rule's name: one run ends once, so an end that
is decided again (its commit replayed after a crash) makes the same ids, which the
store keeps as they are.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from shardcron.client.types import (
    Delivery,
    Job,
    NotifyPolicy,
    NotifyRule,
    Run,
    RunState,
)

_FAILED = (RunState.FAILED, RunState.TIMED_OUT)
_NOT_RUN = (RunState.MISSED, RunState.SKIPPED)


def matches(
    policy: NotifyPolicy,
    run: Run,
    *,
    streak_before: int,
    streak_after: int,
    start_decided: bool = False,
) -> list[tuple[NotifyRule, str]]:
    """The rules ``run``'s end matches, each with its reason in words. ``start_decided``:
    its start was seen, and ``late`` decided then (``decide_start``)."""
    out: list[tuple[NotifyRule, str]] = []
    why = _run_reason(run)
    if run.state in _FAILED:
        if policy.on_failure:
            out.append((NotifyRule.FAILURE, f"attempt {run.attempt} {why}"))
        if policy.on_dead_letter and run.dead_letter:
            out.append(
                (NotifyRule.DEAD_LETTER, f"no attempt left after attempt {run.attempt}: {why}")
            )
    n = policy.on_consecutive_failures
    if n and streak_before < n <= streak_after:
        out.append((NotifyRule.CONSECUTIVE_FAILURES, f"{streak_after} consecutive failed runs"))
    if policy.on_recovery and run.state == RunState.SUCCEEDED and streak_before > 0:
        out.append((NotifyRule.RECOVERY, f"succeeded after {streak_before} failed runs"))
    if not start_decided and (late := _late(policy, run)) is not None:
        out.append(late)
    if policy.on_missed and run.state in _NOT_RUN:
        said = run.lateness.text if run.lateness is not None else why  # the poller's words
        out.append((NotifyRule.MISSED, f"{run.state.lower()}: {said}"))
    return out


def _late(policy: NotifyPolicy, run: Run) -> tuple[NotifyRule, str] | None:
    late = policy.on_late
    if late is None or run.started_at is None or run.started_at - run.due_at <= late:
        return None
    lag = (run.started_at - run.due_at).total_seconds()
    why = f": {run.lateness.text}" if run.lateness is not None else ""
    return NotifyRule.LATE, f"started {lag:.3f}s after it was due (limit {late}){why}"


def decide_start(
    job: Job, run: Run, now: datetime, *, owner_defaults: NotifyPolicy | None = None
) -> list[Delivery]:
    """At a run's start (its worker's ``Started``): the ``late`` delivery, if it started
    late, so a late run is told of when it starts, not when it ends."""
    policy = job.spec.notify or owner_defaults
    late = None if policy is None else _late(policy, run)
    if policy is None or late is None:
        return []
    return [_delivery(job, run, policy, *late, now)]


def decide(
    job: Job,
    run: Run,
    now: datetime,
    *,
    streak_before: int = 0,
    streak_after: int = 0,
    owner_defaults: NotifyPolicy | None = None,
    start_decided: bool = False,
) -> list[Delivery]:
    """The deliveries ``run``'s end makes under ``job``'s policy, else its owner's
    default rules (none without either)."""
    policy = job.spec.notify or owner_defaults
    if policy is None:
        return []
    found = matches(
        policy,
        run,
        streak_before=streak_before,
        streak_after=streak_after,
        start_decided=start_decided,
    )
    return [_delivery(job, run, policy, rule, reason, now) for rule, reason in found]


def _delivery(
    job: Job, run: Run, policy: NotifyPolicy, rule: NotifyRule, reason: str, now: datetime
) -> Delivery:
    delivery_id = f"{run.id}.{rule.lower()}"
    return Delivery(
        id=delivery_id,
        owner=job.owner,
        job_id=job.id,
        run_id=run.id,
        shard=run.shard,
        rule=rule,
        reason=reason,
        webhook_url=policy.webhook_url,
        body=body(job, run, delivery_id, rule, reason, slack=policy.slack),
        created_at=run.ended_at or now,
    )


def body(
    job: Job, run: Run, delivery_id: str, rule: NotifyRule, reason: str, *, slack: bool
) -> bytes:
    """The exact bytes POSTed (and signed): the JSON record, or Slack's ``{"text"}``."""
    if slack:
        text = (
            f"shardcron: job *{job.spec.name}* ({job.id}) {rule.lower().replace('_', ' ')}:"
            f" {reason} (run {run.id})"
        )
        record: dict[str, Any] = {"text": text}
    else:
        record = {
            "delivery_id": delivery_id,
            "rule": rule.lower(),
            "reason": reason,
            "job": {"id": job.id, "name": job.spec.name, "owner": job.owner},
            "run": {
                "id": run.id,
                "state": str(run.state),
                "reason": str(run.reason),
                "error": run.error,
                "attempt": run.attempt,
                "exit_code": run.exit_code,
                "fire_key": run.fire_key,
                "fire_at": _time(run.fire_at),
                "due_at": _time(run.due_at),
                "started_at": _time(run.started_at),
                "ended_at": _time(run.ended_at),
                "dead_letter": run.dead_letter,
                "lateness": None
                if run.lateness is None
                else {"reason": str(run.lateness.reason), "text": run.lateness.text},
            },
        }
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()


def _run_reason(run: Run) -> str:
    parts = [str(run.state)]
    if run.reason:
        parts.append(str(run.reason))
    if run.exit_code is not None:
        parts.append(f"exit code {run.exit_code}")
    text = " ".join(parts)
    said = run.error and run.error != f"exit code {run.exit_code}"  # not said twice
    return f"{text}: {run.error}" if said else text


def _time(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()

"""The notification rules (``coordinator/notify/rules.py``), the webhook address rule
(``addresses``), signing and the retry schedule (``sender.retry_at``), as pure code."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import Job, NotifyPolicy, NotifyRule, RunReason, RunState
from shardcron.coordinator.notify.addresses import (
    GuardedResolver,
    RefusedAddress,
    check_webhook,
    literal_refusal,
    public,
)
from shardcron.coordinator.notify.rules import decide, decide_start, matches
from shardcron.coordinator.notify.sender import NotifyConfig, retry_at
from shardcron.coordinator.notify.signing import signature, verify
from shardcron.coordinator.rows import _spec_from_json, _spec_to_json
from shardcron.coordinator.validation import validate_spec
from tests.support.store_builders import T0, S, make_job, make_run

ALL = NotifyPolicy(
    webhook_url="https://hooks.example/x",
    on_failure=True,
    on_recovery=True,
    on_dead_letter=True,
    on_consecutive_failures=3,
    on_late=timedelta(seconds=30),
    on_missed=True,
)


def _with(policy: NotifyPolicy) -> Job:
    job = make_job()
    return dataclasses.replace(job, spec=job.spec.replace(notify=policy))


def _rules(run, before: int = 0, after: int = 0, policy: NotifyPolicy = ALL) -> set[NotifyRule]:  # type: ignore[no-untyped-def]
    return {rule for rule, _ in matches(policy, run, streak_before=before, streak_after=after)}


def test_each_rule_matches_its_end_and_no_other() -> None:
    job = make_job()
    failed = make_run(job, state=RunState.FAILED, reason=RunReason.NON_ZERO_EXIT, exit_code=2)
    assert _rules(failed, 0, 1) == {NotifyRule.FAILURE}
    dead = make_run(job, state=RunState.FAILED, dead_letter=True)
    assert _rules(dead, 0, 1) == {NotifyRule.FAILURE, NotifyRule.DEAD_LETTER}
    assert _rules(failed, 2, 3) == {NotifyRule.FAILURE, NotifyRule.CONSECUTIVE_FAILURES}
    assert NotifyRule.CONSECUTIVE_FAILURES not in _rules(failed, 3, 4)  # once per streak
    ok = make_run(job, state=RunState.SUCCEEDED, started_at=T0 + S)
    assert _rules(ok, 2, 0) == {NotifyRule.RECOVERY}
    assert _rules(ok, 0, 0) == set()
    late = make_run(job, state=RunState.SUCCEEDED, started_at=T0 + 31 * S)
    assert _rules(late) == {NotifyRule.LATE}
    skipped = make_run(job, state=RunState.SKIPPED, reason=RunReason.OVERLAP)
    missed = make_run(job, state=RunState.MISSED, reason=RunReason.DEADLINE)
    assert _rules(skipped) == _rules(missed) == {NotifyRule.MISSED}
    only_failure = NotifyPolicy(webhook_url="https://h/x", on_failure=True)
    assert _rules(dead, 2, 3, only_failure) == {NotifyRule.FAILURE}


def test_a_delivery_carries_the_run_and_a_stable_id() -> None:
    job = _with(ALL)
    run = make_run(job, state=RunState.MISSED, reason=RunReason.DEADLINE, ended_at=T0 + S)
    [d] = decide(job, run, T0 + 2 * S)
    assert d.id == f"{run.id}.missed" and d.shard == run.shard and d.owner == job.owner
    assert d.created_at == run.ended_at
    record = json.loads(d.body)
    assert record["delivery_id"] == d.id and record["rule"] == "missed"
    assert record["run"]["reason"] == "DEADLINE" and record["job"]["id"] == job.id
    assert decide(job, run, T0 + 9 * S)[0].id == d.id  # decided again: the same id
    slack = decide(
        _with(NotifyPolicy(webhook_url="https://h/x", on_missed=True, slack=True)), run, T0
    )
    assert set(json.loads(slack[0].body)) == {"text"}
    assert decide(make_job(), run, T0) == []  # no policy, no delivery


def test_signatures_cover_the_timestamp_and_the_exact_body() -> None:
    sig = signature(b"k", 1700000000, b'{"a":1}')
    assert sig.startswith("sha256=") and verify(b"k", "1700000000", b'{"a":1}', sig)
    assert not verify(b"k", "1700000001", b'{"a":1}', sig)
    assert not verify(b"k", "1700000000", b'{"a": 1}', sig)
    assert not verify(b"other", "1700000000", b'{"a":1}', sig)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "::1",
        "169.254.169.254",
        "10.1.2.3",
        "192.168.0.1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
    ],
)
def test_addresses_of_the_nodes_own_network_are_not_public(address: str) -> None:
    assert not public(address)
    assert literal_refusal(address, allow_private=False) is not None
    assert literal_refusal(address, allow_private=True) is None


def test_a_public_address_passes() -> None:
    assert public("8.8.8.8") and public("2606:4700:4700::1111")
    assert literal_refusal("hooks.example", allow_private=False) is None  # a name: resolved later


class _Rebinding(AbstractResolver):
    """A name that resolved to a public address at create and now resolves to loopback."""

    async def resolve(self, host: str, port: int = 0, family: int = 0) -> list[ResolveResult]:  # type: ignore[override]
        return [
            {
                "hostname": host,
                "host": "127.0.0.1",
                "port": port,
                "family": 2,
                "proto": 6,
                "flags": 0,
            }
        ]

    async def close(self) -> None:
        pass


async def test_the_connect_time_resolver_refuses_a_name_that_now_resolves_inside() -> None:
    with pytest.raises(RefusedAddress):
        await GuardedResolver(allow_private=False, inner=_Rebinding()).resolve("hooks.example", 443)
    allowed = await GuardedResolver(allow_private=True, inner=_Rebinding()).resolve("h", 443)
    assert allowed[0]["host"] == "127.0.0.1"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://hooks.example/x", "http:// or https://"),
        ("https:///x", "no host"),
        ("https://u:p@hooks.example/x", "credentials"),
        ("https://hooks.example:99999/x", "not a URL"),
        ("http://127.0.0.1/x", "refused"),
        ("http://localhost:8080/x", "refused"),
    ],
)
async def test_webhook_urls_refused_at_create_name_the_field(url: str, why: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await check_webhook(url, "spec.notify.webhook_url", allow_private=False)
    assert refused.value.field == "spec.notify.webhook_url" and why in refused.value.reason


def test_a_policy_with_no_rule_or_a_bad_bound_is_refused() -> None:
    spec = make_job().spec
    for policy, field in [
        (NotifyPolicy(webhook_url="https://h/x"), "spec.notify"),
        (NotifyPolicy(webhook_url="https://h/x", on_late=timedelta(0)), "spec.notify.on_late"),
        (
            NotifyPolicy(webhook_url="https://h/x", on_consecutive_failures=-1),
            "spec.notify.on_consecutive_failures",
        ),
        (NotifyPolicy(webhook_url="gopher://h/x", on_failure=True), "spec.notify.webhook_url"),
    ]:
        with pytest.raises(InvalidArgument) as refused:
            validate_spec(spec.replace(notify=policy))
        assert refused.value.field == field


def test_retries_back_off_and_stop_at_their_bounds() -> None:
    config = NotifyConfig(
        initial_backoff=S, max_backoff=60 * S, max_attempts=10, give_up_after=timedelta(hours=1)
    )
    job = _with(ALL)
    [d] = decide(job, make_run(job, state=RunState.FAILED, ended_at=T0), T0)
    waits = []
    for attempts in (1, 2, 3, 8):
        at = retry_at(dataclasses.replace(d, attempts=attempts), T0, config)
        assert at is not None
        waits.append((at - T0).total_seconds())
    assert 1 <= waits[0] <= 1.2 and 2 <= waits[1] <= 2.4 and 4 <= waits[2] <= 4.8
    assert 60 <= waits[3] <= 72  # capped at max_backoff
    assert retry_at(dataclasses.replace(d, attempts=10), T0, config) is None
    assert retry_at(d, T0 + timedelta(hours=2), config) is None  # past give_up_after


def test_a_spec_without_notifications_is_stored_as_before_and_one_with_them_reads_back() -> None:
    spec = make_job().spec
    assert '"notify"' not in _spec_to_json(spec)
    with_rules = spec.replace(notify=ALL)
    assert _spec_from_json(_spec_to_json(with_rules)) == with_rules
    assert _spec_from_json(_spec_to_json(spec)) == spec


def test_a_late_start_is_told_at_the_start_and_not_again_at_the_end() -> None:
    job = _with(ALL)
    started = make_run(job, state=RunState.RUNNING, started_at=T0 + 31 * S)
    [late] = decide_start(job, started, T0 + 31 * S)
    assert late.rule == NotifyRule.LATE and late.id == f"{started.id}.late"
    assert json.loads(late.body)["run"]["state"] == "RUNNING"
    assert decide_start(job, dataclasses.replace(started, started_at=T0 + S), T0) == []
    ended = dataclasses.replace(started, state=RunState.SUCCEEDED, ended_at=T0 + 40 * S)
    assert NotifyRule.LATE not in {d.rule for d in decide(job, ended, T0, start_decided=True)}
    # a start reported with its result only (never seen apart): told at the end
    assert [d.id for d in decide(job, ended, T0)] == [late.id]


def test_late_and_missed_deliveries_say_why_in_the_pollers_words() -> None:
    """A run's lateness (what the poller saw it wait for) is the reason a late or missed
    delivery gives, and rides in the payload."""
    from shardcron.client.types import LateReason, RunLateness

    job = _with(ALL)
    full = RunLateness(reason=LateReason.NO_FREE_SLOT, text="waiting for a free slot for 31.0 s")
    started = make_run(job, state=RunState.RUNNING, started_at=T0 + 31 * S, lateness=full)
    [late] = decide_start(job, started, T0 + 31 * S)
    assert late.reason.endswith(": waiting for a free slot for 31.0 s")
    assert json.loads(late.body)["run"]["lateness"] == {
        "reason": "NO_FREE_SLOT",
        "text": "waiting for a free slot for 31.0 s",
    }
    held = RunLateness(reason=LateReason.OVERLAP, text="overlap: previous run r-1 still running")
    skipped = make_run(
        job, state=RunState.SKIPPED, reason=RunReason.OVERLAP, ended_at=T0, lateness=held
    )
    [missed] = [d for d in decide(job, skipped, T0) if d.rule == NotifyRule.MISSED]
    assert missed.reason == "skipped: overlap: previous run r-1 still running"
    assert (
        json.loads(decide(job, make_run(job, state=RunState.FAILED, ended_at=T0), T0)[0].body)[
            "run"
        ]["lateness"]
        is None
    )

"""Leasing ahead of the due instant (``PollerConfig.lease_lead``).

A worker that says ``Hello.waits_for_due`` holds a lease until its run's ``due_at``
before it starts the run, so the poller triggers runs (fire rules, admission) and
leases them up to the lead ahead of their instant: the turn's work is done before
the instant, and the run starts on it. A worker that does not say so gets its leases
at the due instant, as always. The lease holds one TTL from the due instant, so the
wait never eats into it; a worker lost while it waits loses the lease as any other.

The deciders with hand-set times first, then the poller over a real SQLite store on
a fake clock, with a ``WorkerLink`` recording what the poller sends
(``tests/support/pollers.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest

from shardcron.client.schedule import next_fire
from shardcron.client.stream import LeaseGrant, Results, RunOutcome
from shardcron.client.types import (
    ConcurrencyPolicy,
    OverlapPolicy,
    Run,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.coordinator.poller import Phase, Poller, PollerConfig, fires
from shardcron.coordinator.poller.config import JOB_ROW_RETRY
from shardcron.coordinator.poller.crowded_instants import CROWD
from shardcron.coordinator.poller.events import WorkerClosed, WorkerMessage
from shardcron.coordinator.poller.lease_book import LeaseBook
from shardcron.coordinator.poller.placement import lease_lead, pick_worker
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from tests.support.held_runs import T0, Held, job, lease_all, worker
from tests.support.pollers import (
    SHARDS,
    TICK,
    FakeClock,
    PollerSetup,
    RecordingLink,
    connect,
    turns,
    turns_until,
)
from tests.support.store_builders import make_job, make_run

LEAD = PollerConfig().lease_lead  # the default, as the fake clock's poller runs
TTL = PollerConfig().lease_ttl
WINDOW = PollerConfig().trigger_window


@pytest.fixture
def poller_setup(fake_clock_setup: PollerSetup) -> PollerSetup:
    return fake_clock_setup


# --- the deciders ----------------------------------------------------------------------


def test_runs_are_triggered_ahead_only_while_a_worker_waits_for_due() -> None:
    assert lease_lead([], LEAD) == timedelta(0)
    assert lease_lead([worker("old")], LEAD) == timedelta(0)
    assert lease_lead([worker("old"), worker("new", waits_for_due=True)], LEAD) == LEAD


def test_a_run_not_due_yet_goes_only_to_a_worker_that_waits_for_due() -> None:
    j = job()
    old, new = worker("old", slots=8), worker("new", waits_for_due=True, slots=1)
    assert pick_worker(j, "o", [old, new]) is old  # the most free slots
    assert pick_worker(j, "o", [old, new], early=True) is new
    assert pick_worker(j, "o", [old], early=True) is None


def test_a_run_not_due_yet_waits_for_its_instant_when_only_other_workers_have_room() -> None:
    h = Held()
    j = job()
    old, new = worker("old"), worker("new", waits_for_due=True, slots=1)
    due = T0 + LEAD
    a, b, c = h.slot(j, due=due), h.slot(j, due=due), h.slot(j, due=T0)  # c: due already
    for s in (a, b, c):
        h.admit(s, fresh_fire=True)
    # one early run fits the waiting worker; the other is set aside, not leased early
    assert dict(lease_all(h, [old, new], T0)) == {a.run.id: "new", c.run.id: "old"}
    assert b.phase == Phase.READY
    assert h.table.next_not_due() == due
    assert lease_all(h, [old, new], due - TICK) == []
    # at its instant it goes to whichever worker has room
    assert lease_all(h, [old, new], due) == [(b.run.id, "old")]
    assert h.table.next_not_due() is None


def test_a_run_set_aside_and_forgotten_meanwhile_is_not_placed() -> None:
    h = Held()
    old = worker("old")
    s = h.slot(job(), due=T0 + LEAD)
    h.admit(s, fresh_fire=True)
    assert lease_all(h, [old], T0) == []
    h.end(s)  # cancelled before its instant: ended and forgotten
    assert lease_all(h, [old], T0 + LEAD) == []


def test_a_renewal_never_shortens_a_lease_that_holds_from_its_due_instant() -> None:
    leases = LeaseBook(lease_ttl=TTL, expiry_grace=timedelta(0))
    due = T0 + LEAD
    token, expires = leases.grant("r", "w", due)  # granted at T0, held from its instant
    assert expires == due + TTL
    # a heartbeat while the worker waits for the instant
    assert leases.renew("r", token, "w", T0 + TICK, active=True) == due + TTL
    assert leases.expired(due + TTL - TICK) == []
    assert leases.renew("r", token, "w", due + TICK, active=True) == due + TICK + TTL


# --- the poller ------------------------------------------------------------------------


async def due_run(db: SqliteStore, p: Poller, due_in: timedelta, now: datetime) -> Run:
    base = make_job()
    job = dataclasses.replace(base, created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now + due_in), created_at=now)
    await db.create_jobs([NewJob(job=job, runs=[run])])
    p.runs_created([run], [job])
    await turns_until(lambda: p.phase_of(run.id) == Phase.WAITING, p)
    return run


async def leased_early(p: Poller, clk: FakeClock, link: RecordingLink, run: Run) -> LeaseGrant:
    """Moves the clock to the lead before the run's instant: the run is leased then."""
    await clk.move_to(run.due_at - LEAD)
    await turns_until(lambda: link.granted(run.id) is not None, p)
    grant = link.granted(run.id)
    assert grant is not None
    return grant


async def stored(db: SqliteStore, run: Run) -> Run:
    return (await db.get_runs([run.id]))[run.id]


async def test_a_run_is_leased_ahead_of_its_instant_to_a_worker_that_waits_for_it(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    link = connect(poller, "new", waits=True)
    run = await due_run(sqlite_store, poller, timedelta(seconds=2), clock.now())
    await clock.move_to(run.due_at - LEAD - TICK)
    await turns(poller)
    assert poller.phase_of(run.id) == Phase.WAITING
    grant = await leased_early(poller, clock, link, run)
    # the instant is the run's own; the lease holds one TTL from it
    assert (grant.due_at, grant.fire_at) == (run.due_at, run.fire_at)
    assert grant.expires_at == run.due_at + TTL
    leased = await stored(sqlite_store, run)
    assert leased.state == RunState.LEASED and leased.started_at is None
    assert leased.lease_expires_at == run.due_at + TTL


async def test_runs_due_within_the_trigger_window_of_one_triggered_go_with_it(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    # one-off runs due at instants of their own are triggered, written and leased a
    # window at a time, not a turn each; each still holds from its own instant
    link = connect(poller, "new", waits=True)
    now = clock.now()
    first = await due_run(sqlite_store, poller, timedelta(seconds=2), now)
    inside = await due_run(sqlite_store, poller, timedelta(seconds=2) + WINDOW - TICK, now)
    after = await due_run(sqlite_store, poller, timedelta(seconds=2) + WINDOW + TICK, now)
    await clock.move_to(first.due_at - LEAD - TICK)
    await turns(poller)
    assert not link.leases  # nothing comes within the lead: the window does not either
    await leased_early(poller, clock, link, first)
    granted = {g.run_id: g for g in link.leases}
    assert set(granted) == {first.id, inside.id}
    assert granted[inside.id].due_at == inside.due_at
    assert granted[inside.id].expires_at == inside.due_at + TTL
    assert poller.phase_of(after.id) == Phase.WAITING
    await leased_early(poller, clock, link, after)


async def test_a_worker_that_does_not_wait_gets_its_lease_at_the_instant(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    link = connect(poller, "old", waits=False)
    run = await due_run(sqlite_store, poller, timedelta(seconds=2), clock.now())
    await clock.move_to(run.due_at - TICK)
    await turns(poller)
    assert poller.phase_of(run.id) == Phase.WAITING and not link.leases
    await clock.move_to(run.due_at)
    await turns_until(lambda: link.granted(run.id) is not None, poller)


async def test_beside_a_waiting_worker_one_that_does_not_wait_gets_no_early_lease(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    new = connect(poller, "new", waits=True, slots=1)
    old = connect(poller, "old", waits=False, slots=8)
    first = await due_run(sqlite_store, poller, timedelta(seconds=2), clock.now())
    second = await due_run(sqlite_store, poller, timedelta(seconds=2), clock.now())
    await clock.move_to(first.due_at - LEAD)
    await turns_until(lambda: len(new.leases) == 1, poller)
    await turns(poller)
    assert not old.leases  # the other run waits for its instant, triggered
    early = new.leases[0].run_id
    later = second.id if early == first.id else first.id
    assert poller.phase_of(later) == Phase.READY
    await clock.move_to(first.due_at)
    await turns_until(lambda: old.granted(later) is not None, poller)


async def test_a_cancel_while_its_worker_waits_for_the_instant_ends_the_run_and_frees_the_slot(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    link = connect(poller, "new", waits=True, slots=1)
    run = await due_run(sqlite_store, poller, timedelta(seconds=2), clock.now())
    grant = await leased_early(poller, clock, link, run)
    answer = asyncio.ensure_future(poller.cancel(run, RunReason.CANCELLED_BY_USER))
    await turns_until(lambda: bool(link.cancels), poller)
    assert link.cancels[0].run_id == run.id
    # the worker stops waiting and reports the run cancelled, never started
    outcome = RunOutcome(
        run_id=run.id, job_id=run.job_id, fencing_token=grant.fencing_token,
        state=RunState.CANCELLED, reason=RunReason.CANCELLED_BY_USER, ended_at=clock.now(),
    )  # fmt: skip
    poller.submit(WorkerMessage(link=link, event=Results(outcomes=(outcome,))))
    await turns_until(answer.done, poller)
    ended = answer.result()
    assert (ended.state, ended.reason, ended.started_at) == (
        RunState.CANCELLED,
        RunReason.CANCELLED_BY_USER,
        None,
    )
    [worker] = poller.workers()
    assert worker.slots_used == 0


async def test_a_worker_lost_while_it_waits_loses_the_lease_one_ttl_after_the_instant(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    link = connect(poller, "new", waits=True)
    run = await due_run(sqlite_store, poller, timedelta(seconds=2), clock.now())
    await leased_early(poller, clock, link, run)
    link.closed = True
    poller.submit(WorkerClosed(link=link))
    grace = PollerConfig().expiry_grace
    await clock.move_to(run.due_at + TTL + grace - TICK)
    await turns(poller)
    assert poller.phase_of(run.id) == Phase.LEASED
    await clock.move(TICK)
    await turns_until(lambda: poller.phase_of(run.id) is None, poller)
    lost = await stored(sqlite_store, run)
    assert (lost.state, lost.reason) == (RunState.FAILED, RunReason.WORKER_LOST)


async def test_a_fire_of_a_job_with_a_run_in_flight_is_decided_at_its_instant_not_ahead(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    """Leasing ahead must not move overlap decisions ahead: a FORBID job whose run ends
    within the lead before its next fire runs that fire; were it decided a lead early,
    the fire would be SKIPPED for an overlap that is over by its instant."""
    link = connect(poller, "new", waits=True)
    schedule = Schedule.cron_expr("* * * * *")
    nxt = next_fire(schedule, clock.now() + timedelta(seconds=5))
    assert nxt is not None
    # well within the hint horizon, whatever the second of the minute the clock started at
    await clock.move_to(max(clock.now(), nxt.at - timedelta(seconds=10)))
    base = make_job()
    spec = base.spec.replace(
        schedule=schedule, concurrency=ConcurrencyPolicy(overlap=OverlapPolicy.FORBID)
    )
    now = clock.now()
    job = dataclasses.replace(
        base, spec=spec, schedule_version=1, next_fire_at=nxt.at, next_fire_key=nxt.key,
        created_at=now, updated_at=now,
    )  # fmt: skip
    fire = fires.make_run(job, nxt, shard_count=SHARDS, now=now)
    await sqlite_store.create_jobs([NewJob(job=job, runs=[fire])])
    poller.runs_created([fire], [job])
    await turns_until(lambda: poller.phase_of(fire.id) == Phase.WAITING, poller)
    # a manual run of the job, in flight up to just before the fire's instant
    await clock.move_to(nxt.at - timedelta(seconds=2))
    manual = dataclasses.replace(
        make_run(job, due_at=nxt.at - timedelta(seconds=1), fire_key="manual"),
        created_at=clock.now(),
    )
    await sqlite_store.commit(runs=[manual], due=[manual])
    poller.runs_created([manual], [job])
    grant = await leased_early(poller, clock, link, manual)
    await clock.move_to(nxt.at - LEAD)
    await turns(poller)
    assert poller.phase_of(fire.id) == Phase.WAITING
    assert (await stored(sqlite_store, fire)).state == RunState.PENDING
    ended = RunOutcome(
        run_id=manual.id, job_id=job.id, fencing_token=grant.fencing_token,
        state=RunState.SUCCEEDED, started_at=manual.due_at, ended_at=clock.now(),
    )  # fmt: skip
    poller.submit(WorkerMessage(link=link, event=Results(outcomes=(ended,))))
    await turns_until(lambda: poller.phase_of(manual.id) is None, poller)
    await clock.move_to(nxt.at)
    await turns_until(lambda: link.granted(fire.id) is not None, poller)
    assert (await stored(sqlite_store, fire)).state == RunState.LEASED


async def test_a_run_met_before_its_job_row_is_looked_at_again_after_the_retry_not_each_turn(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run whose job row has not landed is looked at again JOB_ROW_RETRY later. That
    look is at a set time, not a due instant the lead reaches ahead of: were it, every
    turn would trigger the run again and read its job, and the loop would not sleep."""
    connect(poller, "new", waits=True)
    now = clock.now()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now + timedelta(seconds=2)), created_at=now)
    await sqlite_store.commit(runs=[run], due=[run])  # the job row has not landed yet
    poller.runs_created([run])
    await turns_until(lambda: poller.phase_of(run.id) == Phase.WAITING, poller)
    read: list[str] = []
    get_jobs = sqlite_store.get_jobs

    async def counting_get_jobs(job_ids):  # type: ignore[no-untyped-def]
        read.extend(job_ids)
        return await get_jobs(job_ids)

    monkeypatch.setattr(sqlite_store, "get_jobs", counting_get_jobs)
    await clock.move_to(run.due_at - LEAD)
    await turns(poller, 6)
    assert read.count(job.id) == 1
    assert poller.phase_of(run.id) == Phase.WAITING
    await clock.move(JOB_ROW_RETRY)
    await turns(poller, 3)
    assert read.count(job.id) == 2


async def test_the_runs_of_a_crowded_instant_are_leased_further_ahead_than_the_lead(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    # A turn leases at most a batch, so a whole fleet due on one minute was still being
    # leased after it; its instant is reached earlier by its runs (crowded_instants.CrowdedInstants).
    link = connect(poller, "new", waits=True, slots=2 * CROWD)
    due = clock.now() + timedelta(seconds=5)
    runs = await crowd_due(sqlite_store, poller, CROWD, due, clock.now())
    ahead = LEAD + CROWD * PollerConfig().crowd_lead_per_run
    await clock.move_to(due - ahead - TICK)
    await turns(poller)
    assert not link.leases
    await clock.move_to(due - ahead)
    await turns_until(lambda: len(link.leases) == CROWD, poller)
    assert {g.run_id for g in link.leases} == {r.id for r in runs}
    assert all(g.due_at == due and g.expires_at == due + TTL for g in link.leases)


async def crowd_due(db: SqliteStore, p: Poller, n: int, due: datetime, now: datetime) -> list[Run]:
    """``n`` one-off runs due at ``due``, created and hinted; once they are held."""
    created = []
    for _ in range(n):
        job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
        run = dataclasses.replace(make_run(job, due_at=due), created_at=now)
        created.append(NewJob(job=job, runs=[run]))
    await db.create_jobs(created)
    for new in created:
        p.runs_created(new.runs, [new.job])
    runs = [new.runs[0] for new in created]
    await turns_until(lambda: all(p.phase_of(r.id) == Phase.WAITING for r in runs), p)
    return runs


async def test_an_instant_whose_runs_were_cancelled_is_no_longer_crowded_regression(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
) -> None:
    """Issue 33, probe 4: the crowd counts followed the timer heap's entries, which a
    cancelled run left behind, so an instant whose crowd was cancelled stayed crowded
    and the run left at it was leased a crowd's lead early. It counts held runs now."""
    link = connect(poller, "new", waits=True, slots=2 * CROWD)
    due = clock.now() + timedelta(seconds=5)
    *cancelled, kept = await crowd_due(sqlite_store, poller, CROWD + 1, due, clock.now())
    for run in cancelled:
        poller.cancel_job(run.job_id, RunReason.JOB_DELETED)
    await turns_until(lambda: all(poller.phase_of(r.id) is None for r in cancelled), poller)
    crowd_ahead = LEAD + CROWD * PollerConfig().crowd_lead_per_run
    await clock.move_to(due - crowd_ahead)
    await turns(poller, 3)
    assert not link.leases, "leased a crowd's lead ahead with no crowd left"
    await clock.move_to(due - LEAD)
    await turns_until(lambda: link.granted(kept.id) is not None, poller)


async def test_a_lease_the_store_names_durable_goes_out_then_and_only_once(
    sqlite_store: SqliteStore,
    poller: Poller,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that writes in steps (Cassandra) names the runs it already wrote before
    its commit is over (``JobStore.commit``'s ``durable``): their leases go out at
    that moment, and are not sent again when the commit ends."""
    link = connect(poller, "new", waits=True)
    run = await due_run(sqlite_store, poller, timedelta(seconds=2), clock.now())
    commit = sqlite_store.commit
    sent_when_named: list[int] = []

    async def stepped(**kw: Any) -> None:
        durable = kw.pop("durable", None)
        await commit(**kw)
        leased = [r.id for r in kw.get("runs", ()) if r.state == RunState.LEASED]
        if durable is not None and leased:
            durable(leased)
            sent_when_named.append(sum(g.run_id == run.id for g in link.leases))

    monkeypatch.setattr(sqlite_store, "commit", stepped)
    await clock.move_to(run.due_at - LEAD)
    await turns_until(lambda: link.granted(run.id) is not None, poller)
    await turns(poller)
    assert sent_when_named == [1]  # sent as it was named, before the commit returned
    assert sum(g.run_id == run.id for g in link.leases) == 1

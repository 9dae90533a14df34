"""Why a run did not run on time (``coordinator/poller/lateness.py``): the poller over a
real SQLite store on a fake clock, a worker's stream recorded (``tests/support/pollers.py``).

Each reason a run meets past its due instant is shown by the record the poller
writes anyway: the LEASED one of a run leased more than ``late_after`` past due
(the poller came to it late; no worker with a free slot, with its labels, for its
handler; the previous run of its job still running), the final one of a run
skipped or missed (paused, the overlap or misfire policy, its starting deadline).
A run on time gets none, and its slot keeps no waits.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from shardcron.client.schedule import next_fire
from shardcron.client.stream import Hello, Results, RunOutcome
from shardcron.client.types import (
    ConcurrencyPolicy,
    Job,
    JobState,
    LateReason,
    MisfirePolicy,
    OverlapPolicy,
    Resources,
    Run,
    RunReason,
    RunState,
    Schedule,
)
from shardcron.coordinator.poller import Poller, fires
from shardcron.coordinator.poller.events import WorkerConnected, WorkerMessage
from shardcron.coordinator.poller.lateness import (
    LATE_AFTER,
    TEXT_LIMIT,
    Waits,
    from_wait,
    late_after,
    leased,
)
from shardcron.coordinator.poller.placement import WaitReason
from shardcron.coordinator.sqlite.store import SqliteStore
from shardcron.coordinator.store import NewJob
from tests.support.held_runs import T0, Held, worker
from tests.support.held_runs import job as held_job
from tests.support.pollers import (
    SHARDS,
    FakeClock,
    PollerSetup,
    RecordingLink,
    connect,
    turns,
    turns_until,
)
from tests.support.store_builders import make_job, make_run

S = timedelta(seconds=1)


@pytest.fixture
def poller_setup(fake_clock_setup: PollerSetup) -> PollerSetup:
    return fake_clock_setup


async def read(store: SqliteStore, run: Run) -> Run:
    return (await store.get_runs([run.id]))[run.id]


async def hold(store: SqliteStore, poller: Poller, job: Job, *runs: Run) -> None:
    await store.create_jobs([NewJob(job=job, runs=list(runs))])
    poller.runs_created(list(runs), [job])


def run_of(job: Job, due: datetime, key: str = "now") -> Run:
    return dataclasses.replace(make_run(job, due_at=due, fire_key=key), created_at=due - S)


async def leased_record(store: SqliteStore, poller: Poller, link: RecordingLink, run: Run) -> Run:
    await turns_until(lambda: link.granted(run.id) is not None, poller)
    stored = await read(store, run)
    assert stored.state == RunState.LEASED
    return stored


async def final_record(store: SqliteStore, poller: Poller, run: Run) -> Run:
    async def final() -> bool:
        return (await read(store, run)).state.is_final

    await turns_until(final, poller)
    return await read(store, run)


async def wait_seconds(poller: Poller, clock: FakeClock, seconds: int) -> None:
    """The clock moves on a second at a time, with turns between (the runs waiting are
    counted once a second)."""
    for _ in range(seconds):
        await clock.move(S)
        await turns(poller)


def finish(poller: Poller, link: RecordingLink, run: Run, clock: FakeClock) -> None:
    grant = link.granted(run.id)
    assert grant is not None
    outcome = RunOutcome(
        run_id=run.id, job_id=run.job_id, fencing_token=grant.fencing_token,
        state=RunState.SUCCEEDED, started_at=run.due_at, ended_at=clock.now(),
    )  # fmt: skip
    poller.submit(WorkerMessage(link=link, event=Results(outcomes=(outcome,))))


def connect_labelled(poller: Poller, worker_id: str, labels: dict[str, str]) -> RecordingLink:
    link = RecordingLink()
    hello = Hello(worker_id=worker_id, slots=4, handlers=frozenset({"noop"}), labels=labels)
    poller.submit(WorkerConnected(link=link, hello=hello, address=worker_id))
    return link


def recurring(job: Job, now: datetime, **spec: object) -> tuple[Job, Run]:
    """``job`` firing every second, its next fire the first after ``now``, and that
    fire's run."""
    schedule = Schedule.cron_expr("* * * * * *")
    nxt = next_fire(schedule, now)
    assert nxt is not None
    job = dataclasses.replace(
        job, spec=job.spec.replace(schedule=schedule, **spec), schedule_version=1,
        next_fire_at=nxt.at, next_fire_key=nxt.key, created_at=now, updated_at=now,
    )  # fmt: skip
    return job, fires.make_run(job, nxt, shard_count=SHARDS, now=now)


# --- the rules on their own -------------------------------------------------------------


def test_late_means_past_a_second_or_the_lease_lead_whichever_is_longer() -> None:
    assert late_after(timedelta(milliseconds=500)) == LATE_AFTER == S
    assert late_after(3 * S) == 3 * S


@pytest.mark.parametrize("reason", list(WaitReason))
def test_every_reason_a_ready_run_waits_for_has_its_code(reason: WaitReason) -> None:
    assert from_wait(reason).name == reason.name


def test_the_wait_met_the_longest_names_the_lateness_with_its_last_words() -> None:
    waits = Waits(T0)
    waits.seen(LateReason.NO_WORKER_FOR_HANDLER, "no connected worker serves handler x", T0 + S)
    waits.note(LateReason.NO_FREE_SLOT, "waiting for a free slot", T0 + 3 * S)
    waits.note(LateReason.NO_WORKER_FOR_HANDLER, "no connected worker serves handler y", T0 + 8 * S)
    late = leased(waits, T0, T0 + 9 * S)
    # 3 s then 1 s without a worker for the handler, 5 s without a free slot between
    assert (late.reason, late.waited) == (LateReason.NO_FREE_SLOT, 5 * S)
    assert late.text == "leased 9.0 s after its due time: waiting for a free slot for 5.0 s"
    waits.note(LateReason.NO_WORKER_FOR_HANDLER, "no connected worker serves handler y", T0 + 9 * S)
    again = leased(waits, T0, T0 + 12 * S)  # refused, then no worker for 3 s more
    assert again.reason == LateReason.NO_WORKER_FOR_HANDLER
    assert again.text.endswith("no connected worker serves handler y for 7.0 s")


def test_a_lateness_text_is_bounded_whatever_the_labels() -> None:
    waits = Waits(T0, LateReason.NO_WORKER_WITH_LABELS, "no worker has label " + "k=v, " * 100)
    late = leased(waits, T0, T0 + 2 * S)
    assert len(late.text) == TEXT_LIMIT and late.text.endswith("...")


def test_runs_placed_on_time_keep_no_waits_and_record_nothing() -> None:
    """The common path: nothing is made for a run on time."""
    h = Held()
    jobs = [held_job(f"j{i}") for i in range(50)]
    slots = [h.slot(j) for j in jobs]
    for j in jobs:
        h.table.cache_job(j)
    for s in h.table.take_due(T0, T0, 100, to_instant=lambda s: False):
        h.due_rules.trigger(s, T0 + LATE_AFTER, h.turn)  # exactly at the cut-off: on time
    h.leasing.dispatch([worker(slots=100)], T0 + LATE_AFTER, h.turn)
    assert all(s.waits is None and s.run.lateness is None for s in slots)
    assert len(h.turn.runs) == 50


# --- on time ------------------------------------------------------------------------------


async def test_a_run_on_time_records_nothing_and_its_slot_keeps_no_waits(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    link = connect(poller, "w", waits=False)
    job = make_job()
    run = run_of(job, clock.now() + S)
    await hold(sqlite_store, poller, job, run)
    await turns(poller)
    await clock.move(S)
    stored = await leased_record(sqlite_store, poller, link, run)
    assert stored.lateness is None
    assert poller._table.slots[run.id].waits is None


# --- leased late ------------------------------------------------------------------------


async def test_a_run_the_poller_comes_to_late_says_the_poller_was_behind(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    link = connect(poller, "w", waits=False)
    job = make_job()
    run = run_of(job, clock.now() - 3 * S)  # due while the poller was away
    await hold(sqlite_store, poller, job, run)
    late = (await leased_record(sqlite_store, poller, link, run)).lateness
    assert late is not None
    assert late.reason == LateReason.POLLER_BEHIND
    assert late.text == "leased 3.0 s after its due time: poller behind by 3.0 s"
    assert late.waited == 3 * S


async def test_a_run_whose_workers_are_full_waited_for_a_free_slot(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    link = connect(poller, "w", waits=False, slots=1)
    job = make_job()
    blocker = run_of(job, clock.now(), "blocker")
    late = run_of(job, clock.now() + S, "late")
    await hold(sqlite_store, poller, job, blocker, late)
    await leased_record(sqlite_store, poller, link, blocker)
    await clock.move(S)  # the late run is due: the only slot is taken
    await turns(poller)
    await wait_seconds(poller, clock, 4)
    assert link.granted(late.id) is None
    finish(poller, link, blocker, clock)
    lateness = (await leased_record(sqlite_store, poller, link, late)).lateness
    assert lateness is not None
    assert lateness.reason == LateReason.NO_FREE_SLOT
    assert lateness.text == ("leased 4.0 s after its due time: waiting for a free slot for 4.0 s")
    assert lateness.waited == 4 * S
    counted = poller.metrics.registry.get_sample_value
    assert counted("shardcron_runs_late_total", {"reason": "NO_FREE_SLOT"}) == 1
    assert counted("shardcron_runs_late_total", {"reason": "POLLER_BEHIND"}) is None
    # the record the run ends with keeps it
    finish(poller, link, late, clock)
    ended = await final_record(sqlite_store, poller, late)
    assert (ended.state, ended.lateness) == (RunState.SUCCEEDED, lateness)


async def test_a_run_no_worker_has_the_labels_of_waits_for_them(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    connect_labelled(poller, "plain", {})
    base = make_job()
    job = dataclasses.replace(
        base, spec=base.spec.replace(resources=Resources(labels={"gpu": "a100"}))
    )
    run = run_of(job, clock.now() + S)
    await hold(sqlite_store, poller, job, run)
    await turns(poller)
    await clock.move(S)
    await turns(poller)
    await wait_seconds(poller, clock, 3)
    gpu = connect_labelled(poller, "gpu", {"gpu": "a100"})
    lateness = (await leased_record(sqlite_store, poller, gpu, run)).lateness
    assert lateness is not None
    assert lateness.reason == LateReason.NO_WORKER_WITH_LABELS
    assert lateness.text.endswith("no worker has label gpu=a100 for 3.0 s")
    assert lateness.waited == 3 * S


async def test_a_run_with_no_worker_for_its_handler_says_so(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    job = make_job()
    run = run_of(job, clock.now())
    await hold(sqlite_store, poller, job, run)
    await turns(poller)
    await wait_seconds(poller, clock, 2)
    link = connect(poller, "w", waits=False)
    lateness = (await leased_record(sqlite_store, poller, link, run)).lateness
    assert lateness is not None
    assert lateness.reason == LateReason.NO_WORKER_FOR_HANDLER
    assert "no connected worker serves handler noop for 2.0 s" in lateness.text


async def test_a_queued_run_waited_for_the_previous_run_of_its_job(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    link = connect(poller, "w", waits=False)
    base = make_job()
    job = dataclasses.replace(
        base,
        spec=base.spec.replace(
            concurrency=ConcurrencyPolicy(max_concurrent=1, overlap=OverlapPolicy.QUEUE)
        ),
    )
    first = run_of(job, clock.now(), "first")
    second = run_of(job, clock.now() + S, "second")
    await hold(sqlite_store, poller, job, first, second)
    await leased_record(sqlite_store, poller, link, first)
    await clock.move(S)
    await turns(poller)
    await wait_seconds(poller, clock, 5)
    finish(poller, link, first, clock)
    lateness = (await leased_record(sqlite_store, poller, link, second)).lateness
    assert lateness is not None
    assert lateness.reason == LateReason.OVERLAP
    assert lateness.text == (
        f"leased 5.0 s after its due time: overlap: previous run {first.id} still running"
        " (QUEUE) for 5.0 s"
    )
    assert lateness.waited == 5 * S


async def test_a_run_held_by_its_jobs_concurrency_limit_says_so(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    link = connect(poller, "w", waits=False)
    base = make_job()
    job = dataclasses.replace(
        base, spec=base.spec.replace(concurrency=ConcurrencyPolicy(max_concurrent=2))
    )
    going = [run_of(job, clock.now(), f"going-{i}") for i in range(2)]
    waiting = run_of(job, clock.now() + S, "waiting")
    await hold(sqlite_store, poller, job, *going, waiting)
    for run in going:
        await leased_record(sqlite_store, poller, link, run)
    await clock.move(S)
    await turns(poller)
    await wait_seconds(poller, clock, 2)
    finish(poller, link, going[0], clock)
    lateness = (await leased_record(sqlite_store, poller, link, waiting)).lateness
    assert lateness is not None
    assert lateness.reason == LateReason.CONCURRENCY_LIMIT
    assert "concurrency limit: 2 runs of its job going for 2.0 s" in lateness.text


async def test_a_run_held_back_by_a_pause_says_it_was_paused_once_resumed(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    """A one-off run of a paused job waits in the store; resumed, it is leased late,
    and says it was paused, not that the poller was behind."""
    link = connect(poller, "w", waits=False)
    job = make_job(state=JobState.PAUSED)
    run = run_of(job, clock.now())
    await hold(sqlite_store, poller, job, run)
    await turns_until(lambda: poller.phase_of(run.id) is None, poller)  # dropped: paused
    assert link.granted(run.id) is None
    await wait_seconds(poller, clock, 5)
    resumed = dataclasses.replace(job, state=JobState.ACTIVE, version=2, updated_at=clock.now())
    await sqlite_store.update_job(resumed, expected_version=1, due=[run])
    poller.runs_created([run], [resumed])  # ResumeJob indexes it again
    lateness = (await leased_record(sqlite_store, poller, link, run)).lateness
    assert lateness is not None
    assert lateness.reason == LateReason.PAUSED
    assert lateness.text == "leased 5.0 s after its due time: paused for 5.0 s"


# --- skipped or missed ---------------------------------------------------------------------


async def test_a_fire_of_a_paused_job_is_skipped_as_paused(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    connect(poller, "w", waits=False)
    job, fire = recurring(make_job(state=JobState.PAUSED), clock.now())
    await hold(sqlite_store, poller, job, fire)
    await clock.move_to(fire.due_at)
    ended = await final_record(sqlite_store, poller, fire)
    assert (ended.state, ended.reason) == (RunState.SKIPPED, RunReason.PAUSED)
    assert ended.lateness is not None
    assert (ended.lateness.reason, ended.lateness.text) == (LateReason.PAUSED, "paused")


async def test_a_fire_while_the_previous_run_still_runs_is_skipped_under_forbid(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    link = connect(poller, "w", waits=False)
    forbid = ConcurrencyPolicy(overlap=OverlapPolicy.FORBID)
    job, fire = recurring(make_job(), clock.now() + S, concurrency=forbid)
    manual = run_of(job, clock.now(), "manual")
    await hold(sqlite_store, poller, job, manual, fire)
    await leased_record(sqlite_store, poller, link, manual)
    await clock.move_to(fire.due_at)
    ended = await final_record(sqlite_store, poller, fire)
    assert (ended.state, ended.reason) == (RunState.SKIPPED, RunReason.OVERLAP)
    assert ended.lateness is not None
    assert ended.lateness.reason == LateReason.OVERLAP
    assert ended.lateness.text == f"overlap: previous run {manual.id} still running (FORBID)"


async def test_an_overdue_fire_is_skipped_by_its_misfire_policy(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    connect(poller, "w", waits=False)
    job, fire = recurring(make_job(), clock.now() - 10 * S, misfire=MisfirePolicy.SKIP)
    await hold(sqlite_store, poller, job, fire)
    ended = await final_record(sqlite_store, poller, fire)
    assert (ended.state, ended.reason) == (RunState.SKIPPED, RunReason.MISFIRE)
    assert ended.lateness is not None
    late = (clock.now() - fire.fire_at).total_seconds()
    assert ended.lateness.reason == LateReason.MISFIRE
    assert ended.lateness.text == f"misfire policy SKIP: came due {late:.1f} s after its fire time"


async def test_a_run_missed_at_its_starting_deadline_says_what_it_waited_for(
    sqlite_store: SqliteStore, poller: Poller, clock: FakeClock
) -> None:
    base = make_job()
    job = dataclasses.replace(base, spec=base.spec.replace(starting_deadline=3 * S))
    run = run_of(job, clock.now())
    await hold(sqlite_store, poller, job, run)
    await turns(poller)
    await wait_seconds(poller, clock, 4)
    ended = await final_record(sqlite_store, poller, run)
    assert (ended.state, ended.reason) == (RunState.MISSED, RunReason.DEADLINE)
    assert ended.lateness is not None
    assert ended.lateness.reason == LateReason.NO_WORKER_FOR_HANDLER
    assert ended.lateness.text.startswith("its starting deadline (3 s) passed: no connected")
    assert len(ended.lateness.text) <= TEXT_LIMIT

"""Builders of the rows the store tests write, and the contract suite's store configuration.

``CONTRACT_CONFIG`` is the configuration every store under the contract suite is
opened with (``tests/test_store_contract.py``); the builders make jobs and runs
valid for it (``make_job(shard=...)`` lands a job in a chosen shard). Other tests
that need a job or a run in a store use them too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from shardcron.client.types import (
    CommandTask,
    ConcurrencyPolicy,
    DstGap,
    DstOverlap,
    HandlerTask,
    Job,
    JobSpec,
    JobState,
    MisfirePolicy,
    OutputChunk,
    OverlapPolicy,
    Resources,
    RetryPolicy,
    Run,
    RunState,
    Schedule,
    ScheduleKind,
)
from shardcron.coordinator.ids import new_job_id, run_id, shard_for
from shardcron.coordinator.store import JobStore, NewJob

CONTRACT_CONFIG = {"shard_count": 8, "bucket_seconds": 60, "output_cap_bytes": 1024}
SHARDS = CONTRACT_CONFIG["shard_count"]
CAP = CONTRACT_CONFIG["output_cap_bytes"]
ALICE, BOB = "alice", "bob"
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)  # on a bucket boundary
S = timedelta(seconds=1)

# --------------------------------------------------------------------------- builders


def make_job(
    owner: str = ALICE,
    *,
    name: str = "job",
    state: JobState = JobState.ACTIVE,
    idempotency_key: str = "",
    labels: dict[str, str] | None = None,
    spec: JobSpec | None = None,
    shard: int | None = None,
) -> Job:
    job_id = new_job_id()
    while shard is not None and shard_for(job_id, SHARDS) != shard:
        job_id = new_job_id()
    spec = spec or JobSpec(name=name, task=HandlerTask(name="noop"), labels=labels or {})
    return Job(
        id=job_id, owner=owner, spec=spec, state=state, version=1,
        created_at=T0, updated_at=T0, idempotency_key=idempotency_key,
    )  # fmt: skip


def make_run(
    job: Job,
    *,
    due_at: datetime = T0,
    state: RunState = RunState.PENDING,
    attempt: int = 1,
    fire_key: str = "now",
    **fields: object,
) -> Run:
    fields.setdefault("priority", job.spec.priority)
    return Run(
        id=run_id(job.id, fire_key, attempt, due_at), job_id=job.id, owner=job.owner,
        fire_key=fire_key, fire_at=due_at, due_at=due_at, state=state, attempt=attempt,
        shard=shard_for(job.id, SHARDS), created_at=T0,
        **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def rich_spec() -> JobSpec:
    """A spec with every field away from its default, to prove an exact round trip."""
    berlin = datetime(2030, 3, 31, 0, 30, tzinfo=UTC).astimezone(ZoneInfo("Europe/Berlin"))
    return JobSpec(
        name="nightly-report",
        task=CommandTask(
            argv=("python", "-c", "print('ü')"), env={"A": "1", "B": ""}, cwd="/srv",
            secret_env={"TOKEN": "s3cr3t"},  # kept as written: only replies redact it
        ),
        schedule=Schedule(  # the store keeps what it is given, whatever the kind uses
            kind=ScheduleKind.CRON, at=T0 + timedelta(microseconds=5), cron="30 2 * * *",
            timezone="Europe/Berlin", interval=timedelta(minutes=7, microseconds=11),
            anchor=datetime(2029, 6, 1, 8, tzinfo=timezone(timedelta(hours=-4))),
            start_at=berlin, end_at=T0 + timedelta(days=400),
            jitter=timedelta(seconds=7, microseconds=3), dst_gap=DstGap.SKIP,
            dst_overlap=DstOverlap.BOTH,
        ),
        priority=-5,
        retry=RetryPolicy(
            max_attempts=4, initial_backoff=timedelta(milliseconds=250), multiplier=1.7,
            max_backoff=timedelta(minutes=3), jitter=0.1,
        ),
        timeout=timedelta(minutes=15, microseconds=1),
        concurrency=ConcurrencyPolicy(max_concurrent=3, overlap=OverlapPolicy.QUEUE),
        misfire=MisfirePolicy.RUN_ALL,
        starting_deadline=timedelta(seconds=90),
        resources=Resources(
            slots=2, cpu_millis=1500, memory_mb=512, labels={"gpu": "a100"}, pids_limit=64,
            output_limit_bytes=5 << 20,
        ),
        pause_after_failures=5,
        labels={"team": "data", "tier": "gold"},
    )  # fmt: skip


def unwritable_job() -> Job:
    """A job no store can write (a label value that is not text): makes a call fail."""
    return make_job(labels={"bad": object()})  # type: ignore[dict-item]


async def create(store: JobStore, job: Job, *runs: Run) -> Job:
    [(stored, created)] = await store.create_jobs([NewJob(job=job, runs=runs)])
    assert created
    return stored


async def all_pages(fetch, page_size: int) -> list:  # type: ignore[no-untyped-def]
    items, token, pages = [], "", 0
    while True:
        page = await fetch(page_size=page_size, page_token=token)
        assert len(page.items) <= page_size
        items += page.items
        pages += 1
        token = page.next_page_token
        if not token:
            return items
        assert pages < 1000


def joined(chunks: list[OutputChunk]) -> tuple[int, bytes]:
    """(offset of the first byte, the bytes), checking the chunks are contiguous."""
    if not chunks:
        return -1, b""
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.offset == a.offset + len(a.data)
    assert not any(c.eof for c in chunks)
    return chunks[0].offset, b"".join(c.data for c in chunks)

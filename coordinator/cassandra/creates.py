"""Creating jobs on Cassandra: idempotency keys claimed with the only LWTs of a create.

Independent api processes may create the same (owner, idempotency key) at once; the
first to claim it (``INSERT ... IF NOT EXISTS``) writes its job, the others get that
job back. A claim whose job never appears (its creator died between claim and
write) is taken over once stale. A create that fails part way settles its keys
(``settle_failed_create``), so a retry with the key never makes a second job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from shardcron.client.errors import Unavailable
from shardcron.client.types import Job, JobState, RunState
from shardcron.coordinator.cassandra.reads import job_rows
from shardcron.coordinator.cassandra.session import Cql
from shardcron.coordinator.cassandra.statements import ROWS
from shardcron.coordinator.cassandra.writes import (
    P_DUE,
    P_JOBS,
    P_RUNS,
    WritePlanner,
    Writes,
    encode_runs,
)
from shardcron.coordinator.store import NewJob

log = logging.getLogger(__name__)
_CLAIM_STALE = timedelta(seconds=60)  # an idempotency claim without its job, this old, is dead
_CLAIM_WAIT = 5.0  # seconds to wait for a concurrent create of the same key to land


async def create_jobs(
    cql: Cql,
    planner: WritePlanner,
    items: Sequence[NewJob],
    *,
    flush: Callable[[Writes], Awaitable[None]],
) -> list[tuple[Job, bool]]:
    """``JobStore.create_jobs``; ``flush`` sends the planned writes."""
    items = list(items)
    if not items:
        return []
    # Encode every row before anything is written: bad input writes nothing.
    writes = Writes()
    texts: dict[int, str] = {}  # each distinct spec's JSON (every spec stays referenced)
    for item in items:
        planner.plan_job(writes, item.job, texts)
    rows = [encode_runs(item.runs) for item in items]
    # Idempotency keys: the first item with a key claims it (an LWT, only here).
    first: dict[tuple[str, str], int] = {}
    for i, item in enumerate(items):
        if item.job.idempotency_key:
            first.setdefault((item.job.owner, item.job.idempotency_key), i)
    claims = {key: items[i].job.id for key, i in first.items()}
    try:
        existing = await _claim(cql, claims)  # key -> existing job, for keys taken
    except BaseException:
        await _release(cql, claims)
        raise
    results: list[tuple[Job, bool]] = []
    created: list[NewJob] = []
    created_rows: list[tuple[Any, ...]] = []
    for i, item in enumerate(items):
        key = (item.job.owner, item.job.idempotency_key)
        if item.job.idempotency_key and (key in existing or first[key] != i):
            results.append((existing.get(key) or items[first[key]].job, False))
        else:
            results.append((item.job, True))
            created.append(item)
            created_rows += rows[i]
    if len(created) != len(items):  # re-plan without the items that were not created
        writes = Writes()
        for item in created:
            planner.plan_job(writes, item.job, texts)
    runs = [run for item in created for run in item.runs]
    due = [r for r in runs if r.state == RunState.PENDING]
    await planner.put_runs(writes, runs, created_rows, due, known_new=True)
    # each job's runs go with the job, one mutation of its partition key; its due rows
    # before them (a scan skips a due row whose run it cannot read yet), or with them
    # when they do not fit one batch with the job (writes.py)
    for item in created:
        writes.beside_job(item.job.id, P_RUNS, P_JOBS)
    writes.merge(P_DUE, into=P_RUNS)
    try:
        await flush(writes)
    except BaseException:
        await settle_failed_create(cql, [i.job for i in created if i.job.idempotency_key])
        raise
    added: dict[str, int] = {}
    for item in created:
        if item.job.state != JobState.DELETED:
            added[item.job.owner] = added.get(item.job.owner, 0) + 1
    count_jobs_later(cql, added)
    return results


def count_jobs_later(cql: Cql, changes: dict[str, int]) -> None:
    """``count_jobs_change`` in the background: a create or delete is answered once its
    own writes are durable, never held up by the counter (a counter write waits out
    its timeout when its leader replica has just gone down, which held creates past
    their callers' deadlines while one Cassandra node of three was lost)."""
    if any(changes.values()):
        task = asyncio.get_running_loop().create_task(count_jobs_change(cql, changes))
        cql.counting.add(task)
        task.add_done_callback(cql.counting.discard)


COUNT_SETTLE = 0.5  # seconds a count waits at most for this node's counter updates


async def counted_lately(cql: Cql) -> None:
    """Waits (``COUNT_SETTLE`` at most) for the counter updates this node has under way,
    so a count read after a create here includes it unless its counter write is stuck."""
    if cql.counting:
        await asyncio.wait(set(cql.counting), timeout=COUNT_SETTLE)


async def count_jobs_change(cql: Cql, changes: dict[str, int]) -> None:
    """Adds each owner's change to its count of live jobs (``JobStore.count_jobs``).
    After the writes it counts: a count may lag a job, never run ahead of one. Best
    effort: the jobs are written either way, and a counter update is not retried (a
    retry of one that landed would count twice), so a failure leaves the count off."""
    try:
        await cql.gather(
            cql.exec(cql.ps["count_jobs_add"], (n, owner)) for owner, n in changes.items() if n
        )
    except Exception as e:  # noqa: BLE001 - the jobs are written; only the count is off
        log.warning("job counts of %s not updated: %s", sorted(changes), e)


async def settle_failed_create(cql: Cql, jobs: list[Job]) -> None:
    """After a create failed part way, decides each key it claimed.

    A write reported failed (a timeout) may have landed, or land later. A job whose
    row is stored keeps its key: a retry with the key gets that job, which may
    already be running, instead of creating a second one. A job not stored is
    erased (a tombstone newer than any of its writes, so a late one cannot bring
    it back) and only then its key freed, so a retry creates the job afresh. When
    Cassandra cannot tell or erase, the key stays claimed; a claim whose job never
    appears is taken over once stale (``_claim``)."""
    if not jobs:
        return
    with contextlib.suppress(Exception):
        # A row stored counts whether or not it can be decoded: never erase a job.
        stored = {r[0] for r in await job_rows(cql, [j.id for j in jobs])}
        gone = [j for j in jobs if j.id not in stored]
        await cql.gather(
            cql.exec(cql.ps[name], args)
            for j in gone
            for name, args in (("drop_job", (j.id,)), ("drop_owner", (j.owner, j.id)))
        )
        await _release(cql, {(j.owner, j.idempotency_key): j.id for j in gone})


async def _release(cql: Cql, claims: dict[tuple[str, str], str]) -> None:
    """Best effort: frees the keys still claimed for jobs that were not written."""
    with contextlib.suppress(Exception):
        await cql.gather(
            cql.exec(cql.ps["release"], (owner, key, job_id))
            for (owner, key), job_id in claims.items()
            if key
        )


async def _claim(cql: Cql, keys: dict[tuple[str, str], str]) -> dict[tuple[str, str], Job]:
    """Claims each (owner, key) for its job id; returns the existing job of every key
    that another job holds. A claim whose job never appeared (its creator died
    between claim and write) is taken over once it is ``_CLAIM_STALE`` old."""
    if not keys:
        return {}
    now = int(time.time() * 1_000_000)
    items = list(keys.items())
    results = await cql.gather(
        cql.exec(cql.ps["claim"], (owner, key, job_id, now)) for (owner, key), job_id in items
    )
    taken = {
        key: (r.column("job_id"), r.column("claimed_at"))
        for (key, _), r in zip(items, results, strict=True)
        if not r.applied
    }
    existing: dict[tuple[str, str], Job] = {}
    deadline = time.monotonic() + _CLAIM_WAIT
    while taken:
        # Decoded strictly: a key held by an unreadable job raises UnreadableRow, as it
        # would for one job read by id, instead of passing for a claim never written.
        rows = await job_rows(cql, [job_id for job_id, _ in taken.values()])
        jobs = {r[0]: ROWS.row_job(r) for r in rows}
        for key, (job_id, _) in list(taken.items()):
            if job_id in jobs:
                existing[key] = jobs[job_id]
                del taken[key]
        for key, (job_id, claimed_at) in list(taken.items()):
            age = timedelta(microseconds=max(0, now - (claimed_at or 0)))
            if age < _CLAIM_STALE:
                continue
            mine = keys[key]
            r = await cql.exec(cql.ps["take_over"], (mine, now, *key, job_id))
            if r.applied:
                del taken[key]
            else:
                taken[key] = (r.column("job_id"), now)
        if not taken:
            break
        if time.monotonic() > deadline:
            raise Unavailable("a create with the same idempotency key is in progress; retry")
        await asyncio.sleep(0.05)
    return existing

"""Reads of the Cassandra store: lookups by id, listings, the due index and cursors.

Listings walk an index partition (``jobs_by_owner``, ``dead_letters``) or a job's
runs in id order and filter what they read with the rules of ``store_rules``, so
a page may need several index reads; indexes are checked against the rows they
point to (an entry left by an interrupted write is skipped). Reads of many rows
skip the rows that cannot be decoded (``BadRowLog``); reads of one row by id
raise ``UnreadableRow``.

The due index of a shard is read bucket by bucket. A window within one bucket (a
poller's scan of the seconds ahead) reads it as it is; a longer one (a re-read of the
recent past, a shard's first scan from its cursor) asks ``shard_buckets`` which of
its buckets ever had rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from shardcron.client.errors import NotFound
from shardcron.client.types import Job, JobState, Page, Run, RunState
from shardcron.coordinator.cassandra.session import Cql
from shardcron.coordinator.cassandra.statements import ROWS
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.rows import BadRowLog, _dt, _us
from shardcron.coordinator.store import DueEntry
from shardcron.coordinator.store_rules import (
    ACTIVE_RUN_STATES,
    JobFilter,
    PageKind,
    clamp_page_size,
    make_page,
    owner_runs_after,
    owner_runs_token,
    page_token_after,
    run_state_order,
    run_state_wanted,
)

# A window over at most this many buckets reads them without the index. One: a scan
# of the next seconds saves its index read, and a longer one reads no empty bucket.
DIRECT_BUCKETS = 1


def _id(item: Job | Run) -> str:
    return item.id


# --------------------------------------------------------------------------- jobs


_ACTIVE = str(JobState.ACTIVE)


def job_row(r: Sequence[Any]) -> Sequence[Any]:
    """A job's row as ``RowCodec.row_job`` reads it, from a row of ``select_job(s)``:
    its columns, then ``poller_state``, ``poller_reason`` and the write times of
    ``state``, ``pause_reason`` and ``poller_state``. The poller's state (COMPLETED or
    PAUSED) is the job's when the user's is ACTIVE and was written before it: a user's
    pause, resume or update written after the poller's move wins, and a job the user
    paused or deleted stays so (the state moves only ACTIVE -> COMPLETED | PAUSED)."""
    moved = r[14]
    if moved is None or r[3] != _ACTIVE or (r[18] or 0) <= max(r[16] or 0, r[17] or 0):
        return r
    reason = r[11] if r[15] is None else r[15]
    return (*r[:3], moved, *r[4:11], reason, *r[12:14])


async def get_job(cql: Cql, owner: str, job_id: str) -> Job:
    rows = (await cql.exec(cql.ps["select_job"], (job_id,))).rows
    if not rows or rows[0][1] != owner:
        raise NotFound(f"job {job_id} not found")
    return ROWS.row_job(job_row(rows[0]))


async def job_rows(cql: Cql, job_ids: Sequence[str]) -> list[Any]:
    """The stored rows of these jobs as ``job_row`` gives them, undecoded (a row without
    an owner is no job: the poller's writes never check that the job is there)."""
    return [job_row(r) for r in await cql.in_("select_jobs", job_ids) if r[1] is not None]


async def get_jobs(cql: Cql, job_ids: Sequence[str], bad_rows: BadRowLog) -> dict[str, Job]:
    return {j.id: j for j in bad_rows.decoded(await job_rows(cql, job_ids), ROWS.row_job)}


async def list_jobs(
    cql: Cql,
    owner: str,
    *,
    states: frozenset[JobState],
    name_prefix: str,
    labels: dict[str, str] | None,
    page_size: int,
    page_token: str,
    bad_rows: BadRowLog,
) -> Page[Job]:
    size = clamp_page_size(page_size)
    after = page_token_after(PageKind.JOBS, page_token) or ""
    wanted = JobFilter.of(states, name_prefix, labels)
    found: list[Job] = []
    chunk = min(1000, 2 * (size + 1))
    while len(found) <= size:
        rows = (await cql.exec(cql.ps["owner_ids"], (owner, after, chunk))).rows
        ids = [r[0] for r in rows]
        if not ids:
            break
        jobs = await get_jobs(cql, ids, bad_rows)
        found += [j for i in ids if (j := jobs.get(i)) and j.owner == owner and wanted.matches(j)]
        after = ids[-1]
        if len(ids) < chunk:
            break
    return make_page(PageKind.JOBS, found, size, _id)


# --------------------------------------------------------------------------- runs


async def get_run(cql: Cql, owner: str, run_id: str) -> Run:
    rows = await _run_rows(cql, [run_id])
    if not rows or rows[0][2] != owner:
        raise NotFound(f"run {run_id} not found")
    return ROWS.row_run(rows[0])


async def _run_rows(
    cql: Cql, run_ids: Sequence[str], job_ids: Mapping[str, str] | None = None
) -> list[Any]:
    """Rows of the runs of ``run_ids`` that exist: their jobs as named by the caller
    (``job_ids``; a run found under another job of the same read is dropped), else as
    the store has seen them (``run_jobs``), else from ``runs_by_id``, then the runs by
    groups of job partitions (``Cql.cross``; a poller loads thousands of runs of as
    many jobs at a time)."""
    named = job_ids or {}
    by_job: dict[str, list[str]] = {}
    unseen: list[str] = []
    for rid in run_ids:
        job_id = named.get(rid) or cql.run_jobs.get(rid)
        if job_id is None:
            unseen.append(rid)
        else:
            by_job.setdefault(job_id, []).append(rid)
    for rid, job_id, _owner in await cql.in_("run_ids", unseen):
        cql.run_jobs.add(rid, job_id)
        by_job.setdefault(job_id, []).append(rid)
    rows = await cql.cross("select_runs_of_jobs", by_job)
    if named:  # the cross product of the read could find a run under a job named for another
        rows = [r for r in rows if named.get(r[0], r[1]) == r[1]]
    # what a poller's commit then takes as stored (``run_states``; columns: _RUN_COLS)
    cql.run_states.learn((r[0], (run_state_order(r[4]), bool(r[5]))) for r in rows)
    return rows


async def get_runs(
    cql: Cql, run_ids: Sequence[str], bad_rows: BadRowLog, job_ids: Mapping[str, str] | None = None
) -> dict[str, Run]:
    rows = await _run_rows(cql, run_ids, job_ids)
    return {r.id: r for r in bad_rows.decoded(rows, ROWS.row_run)}


async def list_runs(
    cql: Cql,
    owner: str,
    job_id: str,
    *,
    states: frozenset[RunState],
    page_size: int,
    page_token: str,
    bad_rows: BadRowLog,
) -> Page[Run]:
    size = clamp_page_size(page_size)
    after = page_token_after(PageKind.RUNS, page_token)
    job = (await cql.exec(cql.ps["select_job"], (job_id,))).rows
    if not job or job[0][1] != owner:
        raise NotFound(f"job {job_id} not found")
    if after is None:
        pages = cql.pages(cql.ps["job_runs"], (job_id,))
    else:
        pages = cql.pages(cql.ps["job_runs_before"], (job_id, after))
    found: list[Run] = []
    async for rows in pages:
        found += bad_rows.decoded((r for r in rows if run_state_wanted(states, r[4])), ROWS.row_run)
        if len(found) > size:
            break
    return make_page(PageKind.RUNS, found, size, _id)


# How many (id, state) rows of runs one ``list_owner_runs`` call reads, at most, before
# it answers with what it found and a token to go on from (checked between jobs, so a
# job's whole history may pass it once).
OWNER_RUNS_SCAN_ROWS = 20_000
_OWNER_IDS_CHUNK = 1000  # job ids read at once; their runs' states read 100 jobs a request
_IN_CHUNK = 100  # a job's wanted runs read with others' at most this many


async def _owner_job_chunks(cql: Cql, owner: str, after: str) -> AsyncIterator[list[str]]:
    """The owner's job ids after ``after``, in id order, ``_OWNER_IDS_CHUNK`` at a time."""
    while True:
        rows = (await cql.exec(cql.ps["owner_ids"], (owner, after, _OWNER_IDS_CHUNK))).rows
        if rows:
            yield [row[0] for row in rows]
        if len(rows) < _OWNER_IDS_CHUNK:
            return
        after = rows[-1][0]


async def list_owner_runs(
    cql: Cql,
    owner: str,
    *,
    states: frozenset[RunState],
    page_size: int,
    page_token: str,
    bad_rows: BadRowLog,
    scan_rows: int = OWNER_RUNS_SCAN_ROWS,
) -> Page[Run]:
    """A bounded scan, there being no index of runs by owner and state: the owner's jobs
    in id order (``jobs_by_owner``, a thousand ids a read), their partitions read as
    (job, id, state) only, a hundred jobs to a request and ten requests at once, and the
    runs wanted read whole, only as many jobs' as the page needs, in one request per
    group of jobs (``Cql.cross``). A call reads about ``scan_rows`` rows at most, so a
    page may be short, or empty, and still carry a token. (One request per job, one at
    a time, made a call that scanned 20,000 jobs wait 15 s; a hundred jobs a request,
    one at a time, 2.8 s.)"""
    size = clamp_page_size(page_size)
    after = owner_runs_after(page_token)
    found: list[Run] = []
    scanned = 0

    async def whole(wanted: dict[str, list[str]]) -> dict[str, list[Run]]:
        """The runs named, by job, newest first (those of another owner left out): jobs
        with a few together, one with many alone (its ids in chunks)."""
        few = {j: ids for j, ids in wanted.items() if len(ids) <= _IN_CHUNK}
        many = [cql.in_("select_runs", ids, j) for j, ids in wanted.items() if j not in few]
        parts = await cql.gather([cql.cross("select_runs_of_jobs", few), *many])
        rows = [row for part in parts for row in part]
        out: dict[str, list[Run]] = {}
        for run in bad_rows.decoded(rows, ROWS.row_run):
            if run.owner == owner:
                out.setdefault(run.job_id, []).append(run)
        return {job_id: sorted(runs, key=_id, reverse=True) for job_id, runs in out.items()}

    def page() -> Page[Run]:
        last = found[size - 1]
        return Page(items=found[:size], next_page_token=owner_runs_token(last.job_id, last.id))

    if after is not None and after[1]:  # the rest of the job the last page ended in
        rows = await cql.all(cql.ps["job_run_states_before"], after)
        scanned += len(rows)
        ids = [rid for rid, state in rows if run_state_wanted(states, state)]
        found += (await whole({after[0]: ids} if ids else {})).get(after[0], [])
        if len(found) > size:
            return page()
    async for chunk in _owner_job_chunks(cql, owner, after[0] if after else ""):
        counts = dict.fromkeys(chunk, 0)
        wanted: dict[str, list[str]] = {}
        for job_id, run_id, state in await cql.in_("jobs_run_states", chunk):
            counts[job_id] += 1
            if run_state_wanted(states, state):
                wanted.setdefault(job_id, []).append(run_id)
        start = 0
        while start < len(chunk):
            # the next jobs whose wanted runs may fill the page (or end the scan), read at once
            end, room, seen = start, size + 1 - len(found), scanned
            while end < len(chunk) and room > 0 and seen < scan_rows:
                room -= len(wanted.get(chunk[end], ()))
                seen += counts[chunk[end]]
                end += 1
            group = chunk[start:end]
            runs = await whole({j: wanted[j] for j in group if j in wanted})
            for job_id in group:  # in id order, as the token goes on from
                scanned += counts[job_id]
                found += runs.get(job_id, [])
                if len(found) > size:
                    return page()
                if scanned >= scan_rows:
                    return Page(items=found, next_page_token=owner_runs_token(job_id))
            start = end
    return Page(items=found)


async def list_active_runs(cql: Cql, job_id: str, bad_rows: BadRowLog) -> list[Run]:
    # Walks the job's partition reading (id, state) only, then reads the active runs
    # whole: an index of active runs would be rewritten on every state change.
    rows = await cql.all(cql.ps["job_run_states"], (job_id,))
    ids = [rid for rid, state in rows if state in ACTIVE_RUN_STATES]
    rows = await cql.in_("select_runs", ids, job_id) if ids else []
    return bad_rows.decoded(rows, ROWS.row_run)


async def list_dead_letters(
    cql: Cql,
    owner: str,
    *,
    job_id: str,
    page_size: int,
    page_token: str,
    bad_rows: BadRowLog,
) -> Page[Run]:
    size = clamp_page_size(page_size)
    cursor = page_token_after(PageKind.DEAD_LETTERS, page_token)
    found: list[Run] = []
    chunk = min(1000, 2 * (size + 1))
    while len(found) <= size:
        if cursor is None:
            rows = (await cql.exec(cql.ps["dead_first"], (owner, chunk))).rows
        else:
            rows = (await cql.exec(cql.ps["dead"], (owner, cursor, chunk))).rows
        if not rows:
            break
        ids = [rid for rid, jid in rows if not job_id or jid == job_id]
        runs = await get_runs(cql, ids, bad_rows) if ids else {}
        # The index is checked against the runs: an entry left by an interrupted
        # write whose run is no longer a dead letter is skipped.
        found += [r for rid in ids if (r := runs.get(rid)) and r.dead_letter and r.owner == owner]
        cursor = rows[-1][0]
        if len(rows) < chunk:
            break
    return make_page(PageKind.DEAD_LETTERS, found, size, _id)


# --------------------------------------------------------------------------- due index


async def scan_due(
    cql: Cql,
    shard: int,
    *,
    bucket_seconds: int,
    due_from: datetime,
    due_until: datetime,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[DueEntry]:
    lo, hi = _us(due_from), _us(due_until)
    if limit <= 0 or hi <= lo:
        return []
    b = bucket_seconds
    first = bucket_for(due_from, b)
    if after is not None and after[0] >= due_from:
        first = max(first, bucket_for(after[0], b))
    last = bucket_for(due_until, b)
    if last - first < DIRECT_BUCKETS * b:
        # a poller's scan of the next seconds: read without asking the index first, one
        # request fewer each time, and scans of the next seconds are most scans
        buckets = list(range(first, last + 1, b))
    else:
        # only the buckets this shard ever had rows in (shard_buckets), oldest first
        buckets = [row[0] for row in await cql.all(cql.ps["buckets"], (shard, first, last))]
    out: list[DueEntry] = []
    for bucket in buckets:
        room = limit - len(out)
        if room <= 0:
            break
        if after is not None and after[0] >= due_from:
            params: tuple[Any, ...] = (shard, bucket, _us(after[0]), after[1], hi, room)
            rows = await cql.all(cql.ps["scan_after"], params)
        else:
            rows = await cql.all(cql.ps["scan"], (shard, bucket, lo, hi, room))
        for t, r, j, p in rows:
            out.append(DueEntry(shard=shard, due_at=_dt(t), run_id=r, job_id=j, priority=p))
            cql.run_jobs.add(r, j)
    return out[:limit]


async def load_cursors(cql: Cql, shards: Sequence[int]) -> dict[int, datetime]:
    rows = await cql.in_("cursors", list(shards))
    return {shard: _dt(us) for shard, us in rows if us is not None}


async def oldest_due(cql: Cql, shard: int, *, bucket_seconds: int) -> datetime | None:
    # From the shard's cursor (rows before it are drained, and may as well be gone),
    # through the buckets the shard has rows in, to the first row still there.
    cursor = (await cql.exec(cql.ps["cursor"], (shard,))).rows
    start = bucket_for(_dt(cursor[0][0]), bucket_seconds) if cursor else -(1 << 62)
    async for rows in cql.pages(cql.ps["first_buckets"], (shard, start)):
        for (bucket,) in rows:
            found = (await cql.exec(cql.ps["first_due"], (shard, bucket))).rows
            if found:
                return _dt(found[0][0])
    return None

"""The embedded ``JobStore``: one SQLite file in WAL mode, written through a group commit.

Writes go through ``group_commit`` (one writer thread: many callers, one fsync with
``synchronous=FULL``; a caller's error undoes only its own writes); reads run on a
small pool, each in one consistent view. The tables and statements are in
``schema``; the rules shared with the Cassandra store (run-state order, page tokens,
list filters, job progress, layout) in ``coordinator/store_rules.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from shardcron.client.errors import NotFound
from shardcron.client.types import Delivery, Job, JobState, OutputChunk, Page, Run, RunState
from shardcron.coordinator.ids import bucket_for
from shardcron.coordinator.notify.records import delivery_row, row_delivery
from shardcron.coordinator.notify.settings import OwnerSettings, policy_from_json, policy_to_json
from shardcron.coordinator.rows import BadRowLog, RowCodec, _dt, _spec_to_json, _us
from shardcron.coordinator.sqlite import writes
from shardcron.coordinator.sqlite.group_commit import Conn, GroupCommitDb
from shardcron.coordinator.sqlite.schema import (
    ARTIFACT_REFS,
    COUNT_JOBS,
    EXPIRE_DELIVERIES,
    INSERT_DELIVERY,
    PUT_OWNER_SETTINGS,
    SELECT_ACTIVE_RUNS,
    SELECT_DELIVERY,
    SELECT_JOB,
    SELECT_OWNER_SETTINGS,
    SELECT_RUN,
    UPDATE_DELIVERY,
    marks,
    prepare,
    select_in,
)
from shardcron.coordinator.sqlite.writes import Row
from shardcron.coordinator.store import (
    DEFAULT_BUCKET_SECONDS,
    DEFAULT_OUTPUT_CAP_BYTES,
    DEFAULT_SHARD_COUNT,
    DELIVERY_KEPT,
    ArtifactRef,
    DueEntry,
    JobProgress,
    NewJob,
)
from shardcron.coordinator.store_rules import (
    JobFilter,
    PageKind,
    StoreLayout,
    clamp_page_size,
    make_page,
    make_row_page,
    owner_runs_after,
    owner_runs_token,
    page_token_after,
    progress_write,
)

_ROWS = RowCodec(null=None)
_row_job = _ROWS.row_job
_run_row, _row_run = _ROWS.run_row, _ROWS.row_run


def _keyset(
    kind: PageKind, where: list[str], args: list[Any], size: int, token: str, *, desc: bool
) -> tuple[str, list[Any], int]:
    """WHERE/ORDER BY/LIMIT of one page (one extra row tells whether another follows),
    and the page size served."""
    size = clamp_page_size(size)
    after = page_token_after(kind, token)
    if after is not None:
        where, args = [*where, "id < ?" if desc else "id > ?"], [*args, after]
    order = "DESC" if desc else "ASC"
    return f"WHERE {' AND '.join(where)} ORDER BY id {order} LIMIT ?", [*args, size + 1], size


def _state_filter(states: frozenset[Any], where: list[str], args: list[Any]) -> None:
    """Adds ``state IN (states)``; no states: any state."""
    if states:
        where.append(f"state IN ({marks(len(states))})")
        args += sorted(str(s) for s in states)


class SqliteStore:
    """``JobStore`` on one SQLite file; see the module docstring for how writes flow."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        shard_count: int = DEFAULT_SHARD_COUNT,
        bucket_seconds: int = DEFAULT_BUCKET_SECONDS,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        retention: timedelta | None = None,
        writer_process: bool = False,
    ) -> None:
        layout = StoreLayout(
            shard_count=shard_count,
            bucket_seconds=bucket_seconds,
            output_cap_bytes=output_cap_bytes,
        )
        self.path = os.fspath(path)
        self.layout = layout
        self.shard_count = layout.shard_count
        self.bucket_seconds = layout.bucket_seconds
        self.output_cap_bytes = layout.output_cap_bytes
        self.retention = retention
        self._db = GroupCommitDb(self.path, process=writer_process)
        self.bad_rows = BadRowLog()

    def count_writer_restarts_into(self, count: Callable[[], object]) -> None:
        """Calls ``count()`` each time a writer process that ended unasked is replaced."""
        self._db.count_restarts_into(count)

    @property
    def _transactions(self) -> int:
        """Group commits so far."""
        return self._db.transactions

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        await self._db.open(
            functools.partial(prepare, layout=self.layout, where=f"store file {self.path}")
        )

    async def close(self) -> None:
        await self._db.close()

    async def _all(self, sql: str, args: Sequence[Any]) -> list[Any]:
        return await self._db.read(lambda c: c.execute(sql, args).fetchall())

    async def _one(self, sql: str, args: Sequence[Any]) -> Any:
        return await self._db.read(lambda c: c.execute(sql, args).fetchone())

    # --- jobs -------------------------------------------------------------

    async def create_jobs(self, items: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        items = list(items)
        entries: list[writes.NewJobRows] = []
        rows = 0
        for item, job_row in zip(items, _ROWS.job_rows(i.job for i in items), strict=True):
            job, runs = item.job, item.runs
            key = (job.owner, job.idempotency_key) if job.idempotency_key else None
            due = [r for r in runs if r.state == RunState.PENDING]
            entries.append((key, job_row, *self._run_rows(runs, due)))
            rows += 1 + len(runs)
        found = await self._db.write(functools.partial(writes.create_jobs, entries), rows)
        results: list[tuple[Job, bool]] = []
        for item, f in zip(items, found, strict=True):
            if f is None:
                results.append((item.job, True))
            elif f[0] == writes.FOUND_STORED:
                results.append((_row_job(f[1]), False))
            else:
                results.append((results[f[1]][0], False))
        return results

    def _run_rows(self, runs: Sequence[Run], due: Sequence[Run]) -> tuple[list[Row], list[Row]]:
        """The rows of ``runs``, and the due-index rows of ``due``."""
        b = self.bucket_seconds
        return [_run_row(r) for r in runs], [
            (r.shard, bucket_for(r.due_at, b), _us(r.due_at), r.id, r.job_id, r.priority)
            for r in due
        ]

    async def count_jobs(self, owner: str) -> int:
        return int((await self._one(COUNT_JOBS, (owner,)))[0])

    async def get_job(self, owner: str, job_id: str) -> Job:
        row = await self._one(SELECT_JOB + " WHERE id = ? AND owner = ?", (job_id, owner))
        if row is None:
            raise NotFound(f"job {job_id} not found")
        return _row_job(row)

    async def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        sql = SELECT_JOB + " WHERE id IN ({})"
        rows = await self._db.read(lambda c: select_in(c, sql, job_ids))
        return {j.id: j for j in self.bad_rows.decoded(rows, _row_job)}

    async def list_jobs(
        self,
        owner: str,
        *,
        states: frozenset[JobState] = frozenset(),
        name_prefix: str = "",
        labels: dict[str, str] | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Job]:
        wanted = JobFilter.of(states, name_prefix, labels)
        where, args = ["owner = ?"], [owner]
        _state_filter(wanted.states, where, args)
        if wanted.name_prefix:
            where.append("substr(name, 1, length(?)) = ?")
            args += [wanted.name_prefix, wanted.name_prefix]
        # A spec that is not JSON matches no label (its row is unreadable, not an error).
        spec = "CASE WHEN json_valid(spec) THEN spec ELSE '{}' END"
        for key, value in wanted.labels.items():
            where.append(
                f"EXISTS (SELECT 1 FROM json_each({spec}, '$.labels') WHERE key = ? AND value = ?)"
            )
            args += [key, value]
        tail, args, size = _keyset(PageKind.JOBS, where, args, page_size, page_token, desc=False)
        rows = await self._all(f"{SELECT_JOB} {tail}", args)
        return make_row_page(PageKind.JOBS, rows, size, _row_job, self.bad_rows)

    async def update_job(
        self,
        job: Job,
        *,
        expected_version: int,
        progress: JobProgress | None = None,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
    ) -> Job:
        spec = _spec_to_json(job.spec)
        values = (job.spec.name, str(job.state), expected_version + 1, job.schedule_version, spec)
        values += (job.pause_reason, _us(job.updated_at), job.id, job.owner, expected_version)
        moved = [] if progress is None else [dataclasses.replace(progress, job_id=job.id)]
        statements = _progress_statements(moved, in_update=True)
        run_rows, due_rows = self._run_rows(runs, due)
        write = functools.partial(writes.update_job, values, statements, run_rows, due_rows)
        return _row_job(await self._db.write(write, 1 + len(run_rows) + len(due_rows)))

    # --- runs -------------------------------------------------------------

    async def commit(
        self,
        *,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
        progress: Sequence[JobProgress] = (),
        write_time: datetime | None = None,  # one process writes this file: not needed
        durable: Callable[[Collection[str]], None] | None = None,  # one transaction: never called
        deliveries: Sequence[Delivery] = (),
    ) -> None:
        runs, due, progress = list(runs), list(due), list(progress)
        if not (runs or due or progress or deliveries):
            return

        run_rows, due_rows = self._run_rows(runs, due)
        statements = _progress_statements(progress)
        if deliveries:
            statements.append((INSERT_DELIVERY, [delivery_row(d) for d in deliveries]))
        write = functools.partial(writes.commit, run_rows, due_rows, statements)
        await self._db.write(write, len(runs) + len(due) + len(progress) + len(deliveries))

    # --- notification deliveries ---------------------------------------------

    async def save_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        rows = [
            (*delivery_row(d)[10:], d.id)  # status .. delivered_at, then the id
            for d in deliveries
        ]
        if not rows:
            return
        # records past DELIVERY_KEPT go with these writes: no sweep of their own
        old = _us(datetime.now(UTC) - DELIVERY_KEPT)
        statements = [(UPDATE_DELIVERY, rows), (EXPIRE_DELIVERIES, [(old,)])]
        await self._db.write(functools.partial(writes.write_statements, statements), len(rows))

    async def pending_deliveries(self, shard: int, *, limit: int = 1000) -> list[Delivery]:
        sql = f"{SELECT_DELIVERY} WHERE shard = ? AND status = 'PENDING' ORDER BY id LIMIT ?"
        return [row_delivery(r) for r in await self._all(sql, (shard, max(0, limit)))]

    async def list_deliveries(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Delivery]:
        where, args = ["owner = ?"], [owner]
        if job_id:
            where, args = [*where, "job_id = ?"], [*args, job_id]
        kind = PageKind.DELIVERIES
        tail, args, size = _keyset(kind, where, args, page_size, page_token, desc=True)
        rows = await self._all(f"{SELECT_DELIVERY} {tail}", args)
        return make_page(kind, [row_delivery(r) for r in rows], size, lambda d: d.id)

    async def get_run(self, owner: str, run_id: str) -> Run:
        row = await self._one(SELECT_RUN + " WHERE id = ? AND owner = ?", (run_id, owner))
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return _row_run(row)

    async def get_runs(
        self, run_ids: Sequence[str], *, job_ids: Mapping[str, str] | None = None
    ) -> dict[str, Run]:
        sql = SELECT_RUN + " WHERE id IN ({})"
        rows = await self._db.read(lambda c: select_in(c, sql, run_ids))
        runs = self.bad_rows.decoded(rows, _row_run)
        named = job_ids or {}
        return {r.id: r for r in runs if named.get(r.id, r.job_id) == r.job_id}

    async def list_runs(
        self,
        owner: str,
        job_id: str,
        *,
        states: frozenset[RunState] = frozenset(),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        where, args = ["job_id = ?"], [job_id]
        _state_filter(states, where, args)
        tail, args, size = _keyset(PageKind.RUNS, where, args, page_size, page_token, desc=True)

        def read(conn: Conn) -> list[Any] | None:
            known = "SELECT 1 FROM jobs WHERE id = ? AND owner = ?"
            if conn.execute(known, (job_id, owner)).fetchone() is None:
                return None
            return conn.execute(f"{SELECT_RUN} {tail}", args).fetchall()

        rows = await self._db.read(read)
        if rows is None:
            raise NotFound(f"job {job_id} not found")
        return make_row_page(PageKind.RUNS, rows, size, _row_run, self.bad_rows)

    async def list_owner_runs(
        self,
        owner: str,
        *,
        states: frozenset[RunState] = frozenset(),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        # One read over the runs_by_owner index: pages are always full here.
        size = clamp_page_size(page_size)
        where, args = ["owner = ?"], [owner]
        _state_filter(states, where, args)
        after = owner_runs_after(page_token)
        if after is not None:
            job_id, run_id = after
            if run_id:
                where.append("(job_id > ? OR (job_id = ? AND id < ?))")
                args += [job_id, job_id, run_id]
            else:
                where.append("job_id > ?")
                args.append(job_id)
        sql = f"{SELECT_RUN} WHERE {' AND '.join(where)} ORDER BY job_id, id DESC LIMIT ?"
        rows = await self._all(sql, [*args, size + 1])
        runs = self.bad_rows.decoded(rows[:size], _row_run)
        if len(rows) <= size:
            return Page(items=runs)
        last = rows[size - 1]  # (id, job_id, ...): the token comes from rows, not runs
        return Page(items=runs, next_page_token=owner_runs_token(last[1], last[0]))

    async def list_active_runs(self, job_id: str) -> list[Run]:
        return self.bad_rows.decoded(await self._all(SELECT_ACTIVE_RUNS, (job_id,)), _row_run)

    async def list_dead_letters(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        where, args = ["owner = ?", "dead_letter = 1"], [owner]
        if job_id:
            where, args = [*where, "job_id = ?"], [*args, job_id]
        kind = PageKind.DEAD_LETTERS
        tail, args, size = _keyset(kind, where, args, page_size, page_token, desc=True)
        rows = await self._all(f"{SELECT_RUN} {tail}", args)
        return make_row_page(kind, rows, size, _row_run, self.bad_rows)

    # --- owner settings ----------------------------------------------------------

    async def put_owner_settings(self, settings: OwnerSettings) -> None:
        row = (
            settings.owner,
            policy_to_json(settings.notify_defaults),
            settings.notify_secret,
            None if settings.updated_at is None else _us(settings.updated_at),
        )
        statements = [(PUT_OWNER_SETTINGS, [row])]
        await self._db.write(functools.partial(writes.write_statements, statements), 1)

    async def get_owner_settings(self, owner: str) -> OwnerSettings | None:
        row = await self._one(f"{SELECT_OWNER_SETTINGS} WHERE owner = ?", (owner,))
        return None if row is None else _settings(row)

    async def list_owner_settings(self) -> list[OwnerSettings]:
        return [_settings(row) for row in await self._all(SELECT_OWNER_SETTINGS, ())]

    # --- due index ----------------------------------------------------------

    async def scan_due(
        self,
        shard: int,
        *,
        due_from: datetime,
        due_until: datetime,
        after: tuple[datetime, str] | None = None,
        limit: int = 1000,
    ) -> list[DueEntry]:
        # Buckets grow with due_at, so (bucket, due_at, run_id) order, read straight off
        # the primary key, is (due_at, run_id) order.
        b = self.bucket_seconds
        where = "shard = ? AND bucket BETWEEN ? AND ? AND due_at >= ? AND due_at < ?"
        args = [shard, bucket_for(due_from, b), bucket_for(due_until, b)]
        args += [_us(due_from), _us(due_until)]
        if after is not None:
            where += " AND (due_at, run_id) > (?, ?)"
            args += [_us(after[0]), after[1]]
        sql = f"SELECT due_at, run_id, job_id, priority FROM due_runs WHERE {where}"
        sql += " ORDER BY bucket, due_at, run_id LIMIT ?"
        rows = await self._all(sql, (*args, max(0, limit)))
        return [DueEntry(shard=shard, due_at=_dt(t), run_id=r, job_id=j, priority=p)
                for t, r, j, p in rows]  # fmt: skip

    async def load_cursors(self, shards: Sequence[int]) -> dict[int, datetime]:
        sql = "SELECT shard, bucket_start FROM shard_cursors WHERE shard IN ({})"
        rows = await self._db.read(lambda c: select_in(c, sql, shards))
        return {shard: _dt(us) for shard, us in rows}

    async def save_cursors(self, cursors: dict[int, datetime]) -> None:
        rows = [(shard, _us(at)) for shard, at in cursors.items()]
        if not rows:
            return

        await self._db.write(functools.partial(writes.save_cursors, rows), len(rows))

    async def add_artifact_refs(self, refs: Sequence[ArtifactRef]) -> None:
        rows = [(r.owner, r.sha256, r.job_id) for r in refs]
        if rows:
            await self._db.write(functools.partial(writes.add_artifact_refs, rows), len(rows))

    async def artifact_refs(self, owner: str, sha256: str, *, limit: int = 100) -> list[str]:
        rows = await self._all(ARTIFACT_REFS, (owner, sha256, max(0, limit)))
        return [job_id for (job_id,) in rows]

    async def remove_artifact_refs(self, refs: Sequence[ArtifactRef]) -> None:
        rows = [(r.owner, r.sha256, r.job_id) for r in refs]
        if rows:
            await self._db.write(functools.partial(writes.remove_artifact_refs, rows), len(rows))

    async def expire_runs(self, now: datetime, *, chunk: int = 2000) -> list[tuple[str, str]]:
        retention = self.retention
        if retention is None:
            return []

        deleted: list[tuple[str, str]] = []
        after = ""
        while True:  # one write per chunk: the writer is never held for a whole sweep
            write = functools.partial(writes.expire_runs, after, chunk, now, retention)
            last, gone = await self._db.write(write, chunk)
            deleted += gone
            if last is None:
                return deleted
            after = last

    async def oldest_due(self, shard: int) -> datetime | None:
        sql = "SELECT due_at FROM due_runs WHERE shard = ? ORDER BY bucket, due_at LIMIT 1"
        row = await self._one(sql, (shard,))
        return None if row is None else _dt(row[0])

    # --- output -------------------------------------------------------------

    async def append_output(self, chunks: Sequence[OutputChunk]) -> None:
        by_run: dict[str, list[tuple[str, bytes]]] = {}
        for chunk in chunks:
            if chunk.data:
                by_run.setdefault(chunk.run_id, []).append((chunk.stream, bytes(chunk.data)))
        if by_run:
            write = functools.partial(writes.append_output, by_run, self.output_cap_bytes)
            await self._db.write(write, len(chunks))

    async def read_output(
        self, run_id: str, *, offset: int = 0, limit: int = 1 << 16
    ) -> list[OutputChunk]:
        def read(conn: Conn) -> list[OutputChunk]:
            kept = 'SELECT min("offset"), max("offset" + length(data)) FROM run_output'
            head, end = conn.execute(kept + " WHERE run_id = ?", (run_id,)).fetchone()
            if head is None:
                return []
            start, out, room = max(head, end + offset if offset < 0 else offset), [], limit
            cur = conn.execute(
                'SELECT "offset", stream, data FROM run_output'
                ' WHERE run_id = ? AND "offset" + length(data) > ? ORDER BY seq',
                (run_id, start),
            )
            for at, stream, data in cur:
                if room <= 0:
                    break
                skip = max(0, start - at)
                piece = bytes(data[skip : skip + room])
                out.append(OutputChunk(run_id=run_id, offset=at + skip, data=piece, stream=stream))
                room -= len(piece)
            cur.close()
            return out

        return await self._db.read(read)


def _settings(row: Any) -> OwnerSettings:
    owner, notify, secret, updated = row
    return OwnerSettings(
        owner=owner,
        notify_defaults=policy_from_json(notify),
        notify_secret=secret,
        updated_at=_dt(updated),
    )


def _progress_statements(
    progress: Sequence[JobProgress], *, in_update: bool = False
) -> writes.Statements:
    """The statements that write each job's progress (``store_rules.progress_write``),
    one per statement text with the rows of every job it applies to (a turn's jobs
    mostly move alike: each one-off job to COMPLETED); the state move only where the
    job is still ACTIVE. Columns and state move go in one statement (a one-off job's
    completion is one UPDATE, not two): its state-moving assignments are ``CASE``s on
    the row as it was before the statement."""
    by_sql: dict[str, list[writes.Row]] = {}
    for p in progress:
        write = progress_write(p, in_update=in_update)
        sets = {c: _us(v) if c == "next_fire_at" else v for c, v in write.columns.items()}
        assignments = [f"{column} = ?" for column in sets]
        where = "WHERE id = ?"
        if write.state is not None:
            moved = {"state": str(write.state)}
            if write.state_reason is not None:
                moved["pause_reason"] = write.state_reason
            if sets:
                assignments += [
                    f"{c} = CASE WHEN state = 'ACTIVE' THEN ? ELSE {c} END" for c in moved
                ]
            else:
                assignments += [f"{column} = ?" for column in moved]
                where += " AND state = 'ACTIVE'"
            sets |= moved
        if sets:
            sql = f"UPDATE jobs SET {', '.join(assignments)} {where}"
            by_sql.setdefault(sql, []).append((*sets.values(), p.job_id))
    return list(by_sql.items())

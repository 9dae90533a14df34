"""What the writer runs: every write of ``SqliteStore`` as a module-level function of
the writing connection and plain rows.

The store turns domain values into rows on the caller's side and hands the writer a
``functools.partial`` of one of these functions, every argument bound but the
connection, which comes last: a value that pickles cheaply, so the
same write runs on a writer thread or in the writer process (``group_commit``). What
a function returns is rows or plain values too; the store turns them back into
domain values.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from shardcron.client.errors import NotFound, VersionConflict
from shardcron.coordinator.rows import _dt
from shardcron.coordinator.sqlite.schema import (
    ADD_ARTIFACT_REF,
    INSERT_DUE,
    INSERT_JOB,
    PRUNE_DUE,
    REMOVE_ARTIFACT_REF,
    RUNS_AFTER,
    SAVE_CURSOR,
    SELECT_JOB,
    UPDATE_JOB,
    UPSERT_RUN,
)
from shardcron.coordinator.store_rules import (
    bytes_in,
    cut_pieces,
    output_head,
    output_window,
    place_output,
    run_expires_at,
)

Conn = Any  # sqlite3.Connection
Row = tuple[Any, ...]
Statements = list[tuple[str, list[Row]]]  # (SQL, the rows it is run with), in order

# One new job: its idempotency key (owner, key) or None, its row, its runs' rows and
# the due-index rows of those pending.
NewJobRows = tuple[tuple[str, str] | None, Row, list[Row], list[Row]]

FOUND_STORED = 0  # create: an item's key names a stored job (its row follows)
FOUND_EARLIER = 1  # create: an item's key is that of an earlier item of the same call


def create_jobs(items: list[NewJobRows], conn: Conn) -> list[tuple[int, Any] | None]:
    """Writes each item whose idempotency key names no job yet; per item, None when it
    was written, else ``(FOUND_STORED, job row)`` or ``(FOUND_EARLIER, item index)``."""
    found: list[tuple[int, Any] | None] = []
    jobs: list[Row] = []
    runs: list[Row] = []
    due: list[Row] = []
    created: dict[tuple[str, str], int] = {}  # this call's new jobs by key: item index
    for i, (key, job, job_runs, job_due) in enumerate(items):
        if key is not None:
            earlier = created.get(key)
            if earlier is not None:
                found.append((FOUND_EARLIER, earlier))
                continue
            sql = f"{SELECT_JOB} WHERE owner = ? AND idempotency_key = ?"
            row = conn.execute(sql, key).fetchone()
            if row is not None:
                found.append((FOUND_STORED, row))
                continue
            created[key] = i
        found.append(None)
        jobs.append(job)
        runs += job_runs
        due += job_due
    conn.executemany(INSERT_JOB, jobs)
    put_runs(conn, runs, due)
    return found


def put_runs(conn: Conn, runs: list[Row], due: list[Row]) -> None:
    conn.executemany(UPSERT_RUN, runs)
    conn.executemany(INSERT_DUE, due)


def update_job(
    values: Row, progress: Statements, runs: list[Row], due: list[Row], conn: Conn
) -> Row:
    """Updates a job at its expected version (``values``, ``UPDATE_JOB``'s, ending with
    id, owner and that version); returns its row as written. Raises ``NotFound`` or
    ``VersionConflict``, writing nothing."""
    job_id, owner, expected = values[-3:]
    if conn.execute(UPDATE_JOB, values).rowcount:
        run_statements(conn, progress)
        put_runs(conn, runs, due)
        return conn.execute(f"{SELECT_JOB} WHERE id = ?", (job_id,)).fetchone()  # type: ignore[no-any-return]
    found = conn.execute("SELECT version FROM jobs WHERE id = ? AND owner = ?", (job_id, owner))
    version = found.fetchone()
    if version is None:
        raise NotFound(f"job {job_id} not found")
    raise VersionConflict(f"job {job_id} is at version {version[0]}, not {expected}")


def commit(runs: list[Row], due: list[Row], progress: Statements, conn: Conn) -> None:
    put_runs(conn, runs, due)
    run_statements(conn, progress)


def run_statements(conn: Conn, statements: Statements) -> None:
    for sql, rows in statements:
        conn.executemany(sql, rows)


def add_artifact_refs(rows: list[Row], conn: Conn) -> None:
    conn.executemany(ADD_ARTIFACT_REF, rows).close()


def remove_artifact_refs(rows: list[Row], conn: Conn) -> None:
    conn.executemany(REMOVE_ARTIFACT_REF, rows).close()


def write_statements(statements: Statements, conn: Conn) -> None:
    """Runs the statements in order (deliveries' outcomes, an owner's settings)."""
    run_statements(conn, statements)


def save_cursors(rows: list[Row], conn: Conn) -> None:
    conn.executemany(SAVE_CURSOR, rows).close()
    conn.executemany(PRUNE_DUE, [(shard, shard) for shard, _ in rows]).close()


def expire_runs(
    after: str, chunk: int, now: datetime, retention: timedelta, conn: Conn
) -> tuple[str | None, list[tuple[str, str]]]:
    """Deletes the runs (and their output) past ``retention`` among the ``chunk`` runs
    after id ``after``; returns the last id read when more may follow, and the deleted
    runs' (owner, run id)."""
    rows = conn.execute(RUNS_AFTER, (after, chunk)).fetchall()
    gone = []
    for run_id, owner, state, dead, ended, due in rows:
        at = run_expires_at(
            state=state,
            dead_letter=bool(dead),
            ended_at=_dt(ended),
            due_at=_dt(due),
            retention=retention,
        )
        if at is not None and at <= now:
            gone.append((owner, run_id))
    ids = [(run_id,) for _, run_id in gone]
    conn.executemany("DELETE FROM run_output WHERE run_id = ?", ids)
    conn.executemany("DELETE FROM runs WHERE id = ?", ids)
    return (rows[-1][0] if len(rows) == chunk else None), gone


# Rows (run_id, seq) hold a run's chunks in order; a chunk's offset counts every byte
# appended to the run before it, so offsets stay absolute when the head is trimmed.


def append_output(by_run: dict[str, list[tuple[str, bytes]]], cap_bytes: int, conn: Conn) -> None:
    """Appends each run's (stream, data) pieces, keeping at most ``cap_bytes`` of it."""
    insert = 'INSERT INTO run_output (run_id, seq, "offset", stream, data) VALUES (?, ?, ?, ?, ?)'
    ends = (
        'SELECT min("offset"), max(seq) + 1, max("offset" + length(data)) FROM run_output'
        " WHERE run_id = ?"
    )
    for run_id, pieces in by_run.items():
        head, seq, end = conn.execute(ends, (run_id,)).fetchone()
        head, seq, end = (head, seq, end) if seq is not None else (0, 0, 0)
        new = place_output(end, pieces)
        new_end = new[-1][0] + len(new[-1][2])
        window = output_window(head, new_end, cap_bytes)
        if window is not None:  # cut before writing: nothing past the cap is stored
            stored = _stored_in(conn, run_id, window) if window[0] < end else []
            near_cut = bytes_in([*stored, *((at, d) for at, _, d in new)], window)
            head = output_head(new_end, cap_bytes, near_cut, window[0])
            new = cut_pieces(new, head)
            _trim(conn, run_id, head)
        for at, stream, data in new:
            conn.execute(insert, (run_id, seq, at, stream, data))
            seq += 1


def _stored_in(conn: Conn, run_id: str, window: tuple[int, int]) -> Sequence[tuple[int, bytes]]:
    sql = (
        'SELECT "offset", data FROM run_output WHERE run_id = ? AND "offset" < ?'
        ' AND "offset" + length(data) > ? ORDER BY seq'
    )
    return [(at, bytes(d)) for at, d in conn.execute(sql, (run_id, window[1], window[0]))]


def _trim(conn: Conn, run_id: str, head: int) -> None:
    """Drops the stored output before ``head``, cutting the chunk that holds it."""
    conn.execute(
        'DELETE FROM run_output WHERE run_id = ? AND "offset" + length(data) <= ?',
        (run_id, head),
    )
    conn.execute(
        'UPDATE run_output SET data = substr(data, ?2 - "offset" + 1), "offset" = ?2'
        ' WHERE run_id = ?1 AND "offset" < ?2',
        (run_id, head),
    )

"""The tables of the SQLite store and the statements that write them.

Times are integer microseconds since the epoch (UTC) and a job's spec is JSON
(``coordinator/rows.py``); a missing time or number is NULL. ``prepare`` creates
the schema when the file has none, records the shard count and bucket size the file
is created with, and refuses a file of another schema version or layout
(``SchemaMismatch``): a run's shard and due bucket are fixed when it is written, so
a file reopened with fewer shards would leave runs no poller scans again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from shardcron.coordinator.notify.records import DELIVERY_COL_COUNT, DELIVERY_COLS
from shardcron.coordinator.rows import _JOB_COLS, _RUN_COL_COUNT, _RUN_COLS
from shardcron.coordinator.store_rules import (
    ACTIVE_RUN_STATES,
    StoreLayout,
    check_schema,
    state_order_sql,
)

Conn = sqlite3.Connection

SCHEMA_VERSION = 1
_IN_CHUNK = 500  # values per IN (...) list
_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL,
    version INTEGER NOT NULL, schedule_version INTEGER NOT NULL, spec TEXT NOT NULL,
    next_fire_at INTEGER, next_fire_key TEXT NOT NULL, idempotency_key TEXT NOT NULL,
    consecutive_failures INTEGER NOT NULL, pause_reason TEXT NOT NULL,
    created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, id);
-- count_jobs reads only this index (a job's state changes rarely: pause, delete)
CREATE INDEX IF NOT EXISTS jobs_by_owner_state ON jobs (owner, state);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_idempotency_key
    ON jobs (owner, idempotency_key) WHERE idempotency_key != '';
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, job_id TEXT NOT NULL, owner TEXT NOT NULL, shard INTEGER NOT NULL,
    state TEXT NOT NULL, dead_letter INTEGER NOT NULL, due_at INTEGER NOT NULL,
    fire_key TEXT NOT NULL, fire_at INTEGER NOT NULL, attempt INTEGER NOT NULL,
    priority INTEGER NOT NULL, worker_id TEXT NOT NULL, lease_token INTEGER NOT NULL,
    lease_expires_at INTEGER, created_at INTEGER, started_at INTEGER, ended_at INTEGER,
    exit_code INTEGER, reason TEXT NOT NULL, error TEXT NOT NULL,
    output_bytes INTEGER NOT NULL, replayed_from TEXT NOT NULL,
    schedule_version INTEGER NOT NULL, peak_memory_bytes INTEGER, cpu_micros INTEGER,
    limits_enforced INTEGER, late_reason TEXT, late_text TEXT, late_waited_micros INTEGER,
    output_sha256 TEXT, output_truncated TEXT, results TEXT);
CREATE INDEX IF NOT EXISTS runs_by_job ON runs (job_id, id DESC);
CREATE INDEX IF NOT EXISTS runs_by_owner ON runs (owner, job_id, id DESC);
CREATE INDEX IF NOT EXISTS runs_dead_letters ON runs (owner, dead_letter, id)
    WHERE dead_letter = 1;
CREATE TABLE IF NOT EXISTS due_runs (
    shard INTEGER NOT NULL, bucket INTEGER NOT NULL, due_at INTEGER NOT NULL,
    run_id TEXT NOT NULL, job_id TEXT NOT NULL, priority INTEGER NOT NULL,
    PRIMARY KEY (shard, bucket, due_at, run_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_output (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, "offset" INTEGER NOT NULL,
    stream TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS shard_cursors (
    shard INTEGER PRIMARY KEY, bucket_start INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS artifact_refs (
    owner TEXT NOT NULL, sha256 TEXT NOT NULL, job_id TEXT NOT NULL,
    PRIMARY KEY (owner, sha256, job_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, job_id TEXT NOT NULL, run_id TEXT NOT NULL,
    shard INTEGER NOT NULL, rule TEXT NOT NULL, reason TEXT NOT NULL,
    webhook_url TEXT NOT NULL, body BLOB NOT NULL, created_at INTEGER NOT NULL,
    status TEXT NOT NULL, attempts INTEGER NOT NULL, next_attempt_at INTEGER,
    last_attempt_at INTEGER, last_error TEXT NOT NULL, delivered_at INTEGER);
CREATE INDEX IF NOT EXISTS deliveries_by_owner ON deliveries (owner, job_id, id);
CREATE INDEX IF NOT EXISTS deliveries_pending ON deliveries (shard, id)
    WHERE status = 'PENDING';
CREATE TABLE IF NOT EXISTS owner_settings (
    owner TEXT PRIMARY KEY, notify TEXT NOT NULL, secret TEXT NOT NULL,
    updated_at INTEGER);
CREATE TABLE IF NOT EXISTS store_layout (
    shard_count INTEGER NOT NULL, bucket_seconds INTEGER NOT NULL);
INSERT INTO schema_version SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM schema_version);
"""

# An existing run is overwritten only by the same or a later state. job_id, owner and
# shard follow from the run id (it hashes the job id), so the upsert leaves them, and
# the indexes on them, alone.
UPSERT_RUN = (
    f"INSERT INTO runs ({_RUN_COLS}) VALUES ({', '.join('?' * _RUN_COL_COUNT)}) ON CONFLICT(id) DO UPDATE"
    f" SET {', '.join(f'{c} = excluded.{c}' for c in _RUN_COLS.replace(' ', '').split(',')[4:])}"
    f" WHERE {state_order_sql('excluded.state')} >= {state_order_sql('runs.state')}"
)
SELECT_JOB = f"SELECT {_JOB_COLS} FROM jobs"
SELECT_RUN = f"SELECT {_RUN_COLS} FROM runs"
INSERT_JOB = f"INSERT INTO jobs ({_JOB_COLS}) VALUES ({', '.join('?' * 14)})"
UPDATE_JOB = (
    "UPDATE jobs SET name = ?, state = ?, version = ?, schedule_version = ?, spec = ?,"
    " pause_reason = ?, updated_at = ? WHERE id = ? AND owner = ? AND version = ?"
)
INSERT_DUE = (
    "INSERT INTO due_runs (shard, bucket, due_at, run_id, job_id, priority)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# Walks the job's runs (runs_by_job): an index of active runs would have to change on
# every state change, and measured, it halved the throughput of those writes.
SELECT_ACTIVE_RUNS = (
    f"{SELECT_RUN} WHERE job_id = ?"
    f" AND state IN ({', '.join(repr(str(s)) for s in ACTIVE_RUN_STATES)})"
)
SAVE_CURSOR = (
    "INSERT INTO shard_cursors (shard, bucket_start) VALUES (?, ?) ON CONFLICT(shard)"
    " DO UPDATE SET bucket_start = excluded.bucket_start"
    " WHERE excluded.bucket_start > shard_cursors.bucket_start"  # never backwards
)
ADD_ARTIFACT_REF = (
    "INSERT INTO artifact_refs (owner, sha256, job_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
)
REMOVE_ARTIFACT_REF = "DELETE FROM artifact_refs WHERE owner = ? AND sha256 = ? AND job_id = ?"
ARTIFACT_REFS = (
    "SELECT job_id FROM artifact_refs WHERE owner = ? AND sha256 = ? ORDER BY job_id LIMIT ?"
)
COUNT_JOBS = "SELECT count(*) FROM jobs WHERE owner = ? AND state != 'DELETED'"
# Retention walks every run in id order, a chunk per write transaction; no index on
# end times (one more index on every run write costs the hot path), so a sweep reads
# the table once.
RUNS_AFTER = (
    "SELECT id, owner, state, dead_letter, ended_at, due_at FROM runs WHERE id > ? ORDER BY id"
    " LIMIT ?"
)
# A delivery stored already is left alone: a replayed end never resets a sent one.
INSERT_DELIVERY = (
    f"INSERT INTO deliveries ({DELIVERY_COLS}) VALUES ({', '.join('?' * DELIVERY_COL_COUNT)})"
    " ON CONFLICT(id) DO NOTHING"
)
UPDATE_DELIVERY = (
    "UPDATE deliveries SET status = ?, attempts = ?, next_attempt_at = ?,"
    " last_attempt_at = ?, last_error = ?, delivered_at = ? WHERE id = ?"
)
PUT_OWNER_SETTINGS = (
    "INSERT INTO owner_settings (owner, notify, secret, updated_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT(owner) DO UPDATE SET notify = excluded.notify, secret = excluded.secret,"
    " updated_at = excluded.updated_at"
)
SELECT_OWNER_SETTINGS = "SELECT owner, notify, secret, updated_at FROM owner_settings"
SELECT_DELIVERY = f"SELECT {DELIVERY_COLS} FROM deliveries"
EXPIRE_DELIVERIES = "DELETE FROM deliveries WHERE created_at < ? AND status != 'PENDING'"
PRUNE_DUE = (
    "DELETE FROM due_runs WHERE shard = ? AND bucket <"
    " (SELECT bucket_start / 1000000 FROM shard_cursors WHERE shard = ?)"
)


# Columns added to a table after files were made with it: (table, column, type).
# ``prepare`` adds those a file lacks; rows written before read them as NULL.
ADDED_COLUMNS = (
    ("runs", "peak_memory_bytes", "INTEGER"),
    ("runs", "cpu_micros", "INTEGER"),
    ("runs", "limits_enforced", "INTEGER"),
    ("runs", "late_reason", "TEXT"),
    ("runs", "late_text", "TEXT"),
    ("runs", "late_waited_micros", "INTEGER"),
    ("runs", "output_sha256", "TEXT"),
    ("runs", "output_truncated", "TEXT"),
    ("runs", "results", "TEXT"),
)


def prepare(conn: Conn, *, layout: StoreLayout, where: str) -> None:
    """Creates the schema if the file has none, and adds the columns an older file lacks
    (``ADDED_COLUMNS``); raises ``SchemaMismatch`` when the file holds another schema
    version or layout. A file made before the layout was recorded takes the layout it
    is next opened with."""
    conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA}")
    try:
        for table, column, kind in ADDED_COLUMNS:
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        conn.execute(
            "INSERT INTO store_layout SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM store_layout)",
            (layout.shard_count, layout.bucket_seconds),
        )
        (version,) = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        shards, bucket = conn.execute("SELECT * FROM store_layout").fetchone()
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    check_schema(where, (version, shards, bucket), layout=layout, version=SCHEMA_VERSION)


def marks(n: int) -> str:
    return ", ".join("?" * n)


def select_in(conn: Conn, sql: str, values: Sequence[Any]) -> list[Any]:
    """Runs ``sql`` (with one ``IN ({})``) over ``values`` in chunks SQLite accepts."""
    values = list(dict.fromkeys(values))
    rows: list[Any] = []
    for i in range(0, len(values), _IN_CHUNK):
        part = values[i : i + _IN_CHUNK]
        rows += conn.execute(sql.format(marks(len(part))), part).fetchall()
    return rows

"""The prepared statements of the Cassandra store, and how rows are bound to them.

Every statement is prepared once at ``open`` (``prepare``) and runs at the store's
consistency; the lightweight transactions (``LWT``: an idempotency claim, its take
over and release, and ``update_job``'s version compare-and-set) at the serial one.
Times are bigint microseconds; "no value" is a sentinel (``NONE``), never a null,
because a null written to Cassandra is a tombstone: rewriting a whole run record
writes none.
"""

from __future__ import annotations

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from shardcron.coordinator.notify.records import DELIVERY_COL_COUNT, DELIVERY_COLS
from shardcron.coordinator.rows import _JOB_COLS, _RUN_COL_COUNT, _RUN_COLS, RowCodec

# A job row as read: its columns, then the state the poller moved it to and that
# state's write time against the user's (``reads.job_row``)
_JOB_SELECT = (
    f"{_JOB_COLS}, poller_state, poller_reason, WRITETIME(state), WRITETIME(pause_reason),"
    " WRITETIME(poller_state)"
)
NONE = -(1 << 63)  # bigint sentinel for "no value" (datetime or int)
ROWS = RowCodec(null=NONE)
_PAGE = 1000  # rows per page of a partition scan

STATEMENTS: dict[str, str] = {
    # jobs
    "insert_job": f"INSERT INTO jobs ({_JOB_COLS}) VALUES ({', '.join('?' * 14)})",
    "insert_owner": "INSERT INTO jobs_by_owner (owner, id) VALUES (?, ?)",
    "count_jobs": "SELECT live FROM job_counts WHERE owner = ?",
    "count_jobs_add": "UPDATE job_counts SET live = live + ? WHERE owner = ?",
    "select_job": f"SELECT {_JOB_SELECT} FROM jobs WHERE id = ?",
    "select_jobs": f"SELECT {_JOB_SELECT} FROM jobs WHERE id IN ?",
    "owner_ids": "SELECT id FROM jobs_by_owner WHERE owner = ? AND id > ? LIMIT ?",
    "update_job": (
        "UPDATE jobs SET name = ?, state = ?, version = ?, schedule_version = ?,"
        " spec = ?, pause_reason = ?, updated_at = ?, next_fire_at = ?,"
        " next_fire_key = ?, consecutive_failures = ? WHERE id = ?"
        " IF owner = ? AND version = ?"
    ),
    "progress": (
        "UPDATE jobs USING TIMESTAMP ? SET next_fire_at = ?, next_fire_key = ?,"
        " consecutive_failures = ?, pause_reason = ? WHERE id = ?"
    ),
    "progress_state": (
        "UPDATE jobs USING TIMESTAMP ? SET poller_state = ?, poller_reason = ? WHERE id = ?"
    ),
    "claim": (
        "INSERT INTO idempotency (owner, key, job_id, claimed_at) VALUES (?, ?, ?, ?) IF NOT EXISTS"
    ),
    "take_over": (
        "UPDATE idempotency SET job_id = ?, claimed_at = ? WHERE owner = ? AND key = ?"
        " IF job_id = ?"
    ),
    "release": "DELETE FROM idempotency WHERE owner = ? AND key = ? IF job_id = ?",
    "drop_job": "DELETE FROM jobs WHERE id = ?",
    "drop_owner": "DELETE FROM jobs_by_owner WHERE owner = ? AND id = ?",
    # runs
    "insert_run": (
        f"INSERT INTO runs ({_RUN_COLS}) VALUES ({', '.join('?' * _RUN_COL_COUNT)})"
        " USING TIMESTAMP ? AND TTL ?"
    ),
    # a PENDING run leased: only what a lease changes (``writes.LEASE_COLUMNS``)
    "lease_run": (
        "UPDATE runs USING TIMESTAMP ? SET state = ?, worker_id = ?, lease_token = ?,"
        " lease_expires_at = ?, late_reason = ?, late_text = ?, late_waited_micros = ?"
        " WHERE job_id = ? AND id = ?"
    ),
    "insert_run_id": "INSERT INTO runs_by_id (id, job_id, owner) VALUES (?, ?, ?) USING TTL ?",
    "run_ids": "SELECT id, job_id, owner FROM runs_by_id WHERE id IN ?",
    "run_states": "SELECT id, state, dead_letter FROM runs WHERE job_id IN ? AND id IN ?",
    "select_runs": f"SELECT {_RUN_COLS} FROM runs WHERE job_id = ? AND id IN ?",
    "select_runs_of_jobs": f"SELECT {_RUN_COLS} FROM runs WHERE job_id IN ? AND id IN ?",
    "job_runs": f"SELECT {_RUN_COLS} FROM runs WHERE job_id = ?",
    "job_runs_before": f"SELECT {_RUN_COLS} FROM runs WHERE job_id = ? AND id < ?",
    "job_run_states": "SELECT id, state FROM runs WHERE job_id = ?",
    "job_run_states_before": "SELECT id, state FROM runs WHERE job_id = ? AND id < ?",
    "jobs_run_states": "SELECT job_id, id, state FROM runs WHERE job_id IN ?",
    "insert_dead": "INSERT INTO dead_letters (owner, run_id, job_id) VALUES (?, ?, ?)",
    "delete_dead": "DELETE FROM dead_letters WHERE owner = ? AND run_id = ?",
    "dead": "SELECT run_id, job_id FROM dead_letters WHERE owner = ? AND run_id < ? LIMIT ?",
    "dead_first": "SELECT run_id, job_id FROM dead_letters WHERE owner = ? LIMIT ?",
    # due index
    "insert_due": (
        "INSERT INTO due_runs (shard, bucket, due_at, run_id, job_id, priority)"
        " VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
    ),
    "insert_bucket": "INSERT INTO shard_buckets (shard, bucket) VALUES (?, ?) USING TTL ?",
    "buckets": ("SELECT bucket FROM shard_buckets WHERE shard = ? AND bucket >= ? AND bucket <= ?"),
    "first_buckets": "SELECT bucket FROM shard_buckets WHERE shard = ? AND bucket >= ?",
    "scan": (
        "SELECT due_at, run_id, job_id, priority FROM due_runs WHERE shard = ?"
        " AND bucket = ? AND due_at >= ? AND due_at < ? LIMIT ?"
    ),
    "scan_after": (
        "SELECT due_at, run_id, job_id, priority FROM due_runs WHERE shard = ?"
        " AND bucket = ? AND (due_at, run_id) > (?, ?) AND due_at < ? LIMIT ?"
    ),
    "first_due": "SELECT due_at FROM due_runs WHERE shard = ? AND bucket = ? LIMIT 1",
    "cursors": "SELECT shard, bucket_start FROM shard_cursors WHERE shard IN ?",
    "cursor": "SELECT bucket_start FROM shard_cursors WHERE shard = ?",
    # The cursor is its own write timestamp: the highest one wins, with no read.
    "save_cursor": (
        "INSERT INTO shard_cursors (shard, bucket_start) VALUES (?, ?) USING TIMESTAMP ?"
    ),
    # the jobs that may name an artifact: one partition per owner and digest
    "add_artifact_ref": "INSERT INTO artifact_refs (owner, sha256, job_id) VALUES (?, ?, ?)",
    "artifact_refs": "SELECT job_id FROM artifact_refs WHERE owner = ? AND sha256 = ? LIMIT ?",
    "remove_artifact_ref": (
        "DELETE FROM artifact_refs WHERE owner = ? AND sha256 = ? AND job_id = ?"
    ),
    # output
    "output_ends": "SELECT head_offset, end_offset FROM run_output WHERE run_id = ? LIMIT 1",
    "output_first_from": (
        "SELECT byte_offset FROM run_output WHERE run_id = ? AND byte_offset >= ? LIMIT 1"
    ),
    "output_insert": (
        "INSERT INTO run_output (run_id, byte_offset, stream, data) VALUES (?, ?, ?, ?) USING TTL ?"
    ),
    "output_trim": "DELETE FROM run_output WHERE run_id = ? AND byte_offset < ?",
    "output_set_ends": (
        "UPDATE run_output USING TTL ? SET head_offset = ?, end_offset = ? WHERE run_id = ?"
    ),
    "output_at": (
        "SELECT byte_offset, stream, data FROM run_output WHERE run_id = ?"
        " AND byte_offset <= ? ORDER BY byte_offset DESC LIMIT 1"
    ),
    "output_from": (
        "SELECT byte_offset, stream, data FROM run_output WHERE run_id = ? AND byte_offset > ?"
    ),
    # notification deliveries: a record is inserted as of the epoch, each attempt's
    # outcome as of now, so a replayed insert never undoes one (cassandra/deliveries)
    "insert_delivery": (
        f"INSERT INTO deliveries ({DELIVERY_COLS}) VALUES ({', '.join('?' * DELIVERY_COL_COUNT)})"
        " USING TIMESTAMP ?"
    ),
    "insert_pending": (
        "INSERT INTO pending_deliveries (shard, id, owner) VALUES (?, ?, ?) USING TIMESTAMP ?"
    ),
    "update_delivery": (
        "UPDATE deliveries USING TIMESTAMP ? SET status = ?, attempts = ?,"
        " next_attempt_at = ?, last_attempt_at = ?, last_error = ?, delivered_at = ?"
        " WHERE owner = ? AND id = ?"
    ),
    "delete_pending": (
        "DELETE FROM pending_deliveries USING TIMESTAMP ? WHERE shard = ? AND id = ?"
    ),
    "pending": "SELECT id, owner FROM pending_deliveries WHERE shard = ? LIMIT ?",
    "put_owner_settings": (
        "INSERT INTO owner_settings (owner, notify, secret, updated_at) VALUES (?, ?, ?, ?)"
    ),
    "owner_settings": "SELECT owner, notify, secret, updated_at FROM owner_settings WHERE owner = ?",
    "all_owner_settings": "SELECT owner, notify, secret, updated_at FROM owner_settings",
    "select_deliveries": f"SELECT {DELIVERY_COLS} FROM deliveries WHERE owner = ? AND id IN ?",
    "owner_deliveries": (
        f"SELECT {DELIVERY_COLS} FROM deliveries WHERE owner = ? AND id < ? LIMIT ?"
    ),
    "job_deliveries": (
        f"SELECT {DELIVERY_COLS} FROM deliveries WHERE owner = ? AND id < ? AND job_id = ?"
        " LIMIT ? ALLOW FILTERING"
    ),
}

# Not idempotent: never retried (their caller reads the outcome; a counter update
# retried after a timeout that had landed would count twice).
LWT = ("update_job", "claim", "take_over", "release", "count_jobs_add")
# Partition scans, read page by page.
_PAGED = (
    "job_runs",
    "job_runs_before",
    "job_run_states",
    "job_run_states_before",
    "jobs_run_states",
    "output_from",
)


def prepare(session: Session) -> dict[str, PreparedStatement]:
    """Every statement of ``STATEMENTS``, prepared on ``session`` (its keyspace set)."""
    prepared = {name: session.prepare(cql) for name, cql in STATEMENTS.items()}
    for name in _PAGED:
        prepared[name].fetch_size = _PAGE
    return prepared

"""The Cassandra schema of the ``JobStore`` (its logical tables: docs/data-layout.md),
versioned.

``schema_cql`` gives the statements; ``ensure_schema`` runs them when the keyspace
has no schema yet (``CassandraStore.open``, and ``init_schema`` behind ``shardcron
store init``), then checks the schema. Every statement is idempotent (``IF NOT
EXISTS``), and the version row is written once, with the cluster's shard count and
bucket size, so a node configured differently refuses to open the store
(``SchemaMismatch``) instead of misplacing runs.

Layout and why:

- ``jobs`` by id; ``jobs_by_owner`` ((owner), id) holds only ids (immutable), so a
  job's progress or update never has to rewrite an index row; listings read the
  jobs of a page by id and filter them. A job's ``state`` and ``pause_reason`` are
  written by its create and its users' updates; ``poller_state`` and
  ``poller_reason`` by the poller alone, when it moves an ACTIVE job to COMPLETED or
  PAUSED. A read takes the poller's over an ACTIVE state written before it
  (``reads.job_row``): the poller's move needs no read of the job first, and a
  user's pause, resume or update written after it wins.
- ``job_counts`` (owner) -> a counter of the owner's jobs that are not DELETED, what a
  ``max_jobs`` quota reads (one row, instead of counting a partition of ids and
  reading each job's state).
- ``idempotency`` ((owner, key)) -> job_id, claimed with ``INSERT ... IF NOT EXISTS``.
- ``runs`` ((job_id), id DESC): a job's history is one partition, newest first (run
  ids start with their due time). ``runs_by_id`` (id) -> job_id, owner, written once
  when a run is first written, so a run is found by its id alone.
- Runs across an owner's jobs by state (``list_owner_runs``, e.g. every RUNNING run)
  have no index: one would be written and deleted on every state change of every
  run (a tombstone each). The listing is a bounded scan instead: ``jobs_by_owner``,
  then the jobs' ``runs`` partitions read as (job, id, state) only, a hundred jobs to
  a request, then the runs a page needs read whole; a call stops after about ``reads.OWNER_RUNS_SCAN_ROWS`` rows and
  answers with a token. Its cost is the owner's runs kept, not the runs wanted: fine
  for a dashboard or a CLI call, not for polling at a high rate.
- ``dead_letters`` ((owner), run_id DESC) -> job_id: an index, checked against
  ``runs`` when read.
- ``due_runs`` ((shard, bucket), due_at, run_id): insert-only, every row with a TTL
  (its due time + ``due_ttl``), time-window compaction, so expired rows go away a
  whole SSTable at a time. ``shard_buckets`` ((shard), bucket) lists the buckets of
  a shard that were ever written (same TTL rule): ``scan_due`` visits only those and
  ``oldest_due`` starts at the shard's cursor, so nothing scans drained or empty
  buckets. ``shard_cursors`` is written with ``USING TIMESTAMP`` = the cursor, so
  the highest cursor wins without a read or a lightweight transaction.
- ``run_output`` ((run_id), byte_offset): chunks keyed by their absolute offset, with
  the kept head and the end as static columns.
- ``artifact_refs`` ((owner, sha256), job_id): the jobs that may name an artifact, one
  partition per artifact, so the artifact sweep reads its first few and never every
  job (``coordinator/artifact_retention.py``). A keyspace made before it gets it from
  ``shardcron store init`` (a node refuses one that lacks it).
- ``deliveries`` ((owner), id DESC): notification deliveries, listed by owner (and
  filtered by job within the owner's partition), each row living ``DELIVERY_KEPT``;
  ``pending_deliveries`` ((shard), id) -> owner: those still to send, each row deleted
  once its delivery is DELIVERED or DROPPED (the poller that owns the shard reads it
  after a restart or a shard move: ``cassandra/deliveries``).
- ``owner_settings`` (owner): an owner's notification defaults and signing secret, one
  row per owner that set them, read whole by every poller node (``notify/settings``).
- Retention (``CassandraStore(retention=...)``) is TTLs, not a sweep: a final run
  that is not a dead letter is written with a TTL that ends ``retention`` after it
  ended; its ``runs_by_id`` row is written with the run's first record with a TTL
  that ends a day after the run's would had it ended when due, and rewritten only by
  the final record of a run that ended later, or of a dead letter
  (``writes.WritePlanner.id_ttl``); output chunks and their ends live ``retention``
  from when they are written (so never longer than their run; a run running longer
  than the retention loses its oldest kept output first). A sweep would read every
  job's partition to find old runs and write a tombstone per row; the TTLs cost no
  read and, for almost every run, no write more.

A table added after a keyspace was created (``job_counts``, the deliveries) is created by
``shardcron store init`` on the existing keyspace; a node refuses to open a keyspace
that lacks one.

Times are bigint microseconds since the epoch (``timestamp`` holds milliseconds only);
"no value" is a sentinel, never a null, so rewriting a record writes no tombstones.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from cassandra.cluster import Session

from shardcron.coordinator.store import DELIVERY_KEPT
from shardcron.coordinator.store_rules import SchemaMismatch, StoreLayout, check_schema

SCHEMA_VERSION = 1
DEFAULT_REPLICATION: dict[str, Any] = {"class": "SimpleStrategy", "replication_factor": 1}
DEFAULT_DUE_TTL = timedelta(days=7)

# Tables, in creation order. ``schema_version`` comes last: its row says the rest exists.
TABLES = (
    "jobs",
    "jobs_by_owner",
    "job_counts",
    "idempotency",
    "runs",
    "runs_by_id",
    "dead_letters",
    "due_runs",
    "shard_buckets",
    "shard_cursors",
    "run_output",
    "artifact_refs",
    "deliveries",
    "pending_deliveries",
    "owner_settings",
    "schema_version",
)

# Columns added to a table after keyspaces were made with it: (table, column, type).
# ``shardcron store init`` adds those a keyspace lacks; a node refuses one that lacks
# any (rows written before read them as null).
ADDED_COLUMNS = (
    ("runs", "peak_memory_bytes", "bigint"),
    ("runs", "cpu_micros", "bigint"),
    ("runs", "limits_enforced", "boolean"),
    ("runs", "late_reason", "text"),
    ("runs", "late_text", "text"),
    ("runs", "late_waited_micros", "bigint"),
    ("runs", "output_sha256", "text"),
    ("runs", "output_truncated", "text"),
    ("runs", "results", "text"),
    ("jobs", "poller_state", "text"),
    ("jobs", "poller_reason", "text"),
)


def _cql_map(value: dict[str, Any]) -> str:
    items = []
    for k, v in value.items():
        literal = str(v) if isinstance(v, int) and not isinstance(v, bool) else f"'{v}'"
        items.append(f"'{k}': {literal}")
    return "{" + ", ".join(items) + "}"


def _ident(name: str) -> str:
    if not name or not (name[0].isalpha() and name.replace("_", "a").isalnum()) or len(name) > 48:
        raise ValueError(f"not a valid keyspace name: {name!r}")
    return name


def _window_hours(due_ttl: timedelta) -> int:
    """TWCS window: about 1/24 of the TTL (a handful of dozen windows alive), 1 h at least."""
    return max(1, int(due_ttl.total_seconds() // 3600 // 24))


def keyspace_cql(keyspace: str, replication: dict[str, Any] | None = None) -> str:
    return (
        f"CREATE KEYSPACE IF NOT EXISTS {_ident(keyspace)}"
        f" WITH replication = {_cql_map(replication or DEFAULT_REPLICATION)}"
    )


def schema_cql(keyspace: str, *, due_ttl: timedelta = DEFAULT_DUE_TTL) -> list[str]:
    """The CREATE TABLE statements of schema version ``SCHEMA_VERSION``."""
    ks = _ident(keyspace)
    ttl = int(due_ttl.total_seconds())
    twcs = (
        "{'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'HOURS',"
        f" 'compaction_window_size': {_window_hours(due_ttl)}}}"
    )
    # TTL'd, insert-only tables: nothing is ever deleted, so tombstones need no long grace.
    expiring = f"default_time_to_live = {ttl} AND gc_grace_seconds = 10800 AND compaction = {twcs}"
    return [
        f"""CREATE TABLE IF NOT EXISTS {ks}.jobs (
            id text PRIMARY KEY, owner text, name text, state text, version int,
            schedule_version int, spec text, next_fire_at bigint, next_fire_key text,
            idempotency_key text, consecutive_failures int, pause_reason text,
            created_at bigint, updated_at bigint, poller_state text, poller_reason text)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.jobs_by_owner (
            owner text, id text, PRIMARY KEY ((owner), id)) WITH CLUSTERING ORDER BY (id ASC)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.job_counts (
            owner text PRIMARY KEY, live counter)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.idempotency (
            owner text, key text, job_id text, claimed_at bigint, PRIMARY KEY ((owner, key)))""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.runs (
            job_id text, id text, owner text, shard int, state text, dead_letter boolean,
            due_at bigint, fire_key text, fire_at bigint, attempt int, priority int,
            worker_id text, lease_token bigint, lease_expires_at bigint, created_at bigint,
            started_at bigint, ended_at bigint, exit_code bigint, reason text, error text,
            output_bytes bigint, replayed_from text, schedule_version int,
            peak_memory_bytes bigint, cpu_micros bigint, limits_enforced boolean,
            late_reason text, late_text text, late_waited_micros bigint,
            output_sha256 text, output_truncated text, results text,
            PRIMARY KEY ((job_id), id)) WITH CLUSTERING ORDER BY (id DESC)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.runs_by_id (
            id text PRIMARY KEY, job_id text, owner text)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.dead_letters (
            owner text, run_id text, job_id text, PRIMARY KEY ((owner), run_id))
            WITH CLUSTERING ORDER BY (run_id DESC)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.due_runs (
            shard int, bucket bigint, due_at bigint, run_id text, job_id text, priority int,
            PRIMARY KEY ((shard, bucket), due_at, run_id))
            WITH CLUSTERING ORDER BY (due_at ASC, run_id ASC) AND {expiring}""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.shard_buckets (
            shard int, bucket bigint, PRIMARY KEY ((shard), bucket))
            WITH CLUSTERING ORDER BY (bucket ASC) AND {expiring}""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.shard_cursors (
            shard int PRIMARY KEY, bucket_start bigint)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.run_output (
            run_id text, byte_offset bigint, stream text, data blob,
            head_offset bigint static, end_offset bigint static,
            PRIMARY KEY ((run_id), byte_offset)) WITH CLUSTERING ORDER BY (byte_offset ASC)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.artifact_refs (
            owner text, sha256 text, job_id text, PRIMARY KEY ((owner, sha256), job_id))""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.deliveries (
            owner text, id text, job_id text, run_id text, shard int, rule text,
            reason text, webhook_url text, body blob, created_at bigint, status text,
            attempts int, next_attempt_at bigint, last_attempt_at bigint, last_error text,
            delivered_at bigint, PRIMARY KEY ((owner), id))
            WITH CLUSTERING ORDER BY (id DESC)
            AND default_time_to_live = {int(DELIVERY_KEPT.total_seconds())}""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.pending_deliveries (
            shard int, id text, owner text, PRIMARY KEY ((shard), id))
            WITH CLUSTERING ORDER BY (id ASC) AND gc_grace_seconds = 10800""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.owner_settings (
            owner text PRIMARY KEY, notify text, secret text, updated_at bigint)""",
        f"""CREATE TABLE IF NOT EXISTS {ks}.schema_version (
            id int PRIMARY KEY, version int, shard_count int, bucket_seconds int,
            created_at bigint)""",
    ]


def ensure_schema(
    session: Session,
    keyspace: str,
    *,
    layout: StoreLayout,
    replication: dict[str, Any],
    due_ttl: timedelta,
    create: bool,
) -> None:
    """Creates the keyspace and schema when they are missing (and ``create``), then
    raises ``SchemaMismatch`` unless they are this code's version and ``layout``."""
    ks = keyspace
    version_sql = (
        f"SELECT version, shard_count, bucket_seconds FROM {ks}.schema_version WHERE id = 0"
    )
    row = None
    tables = session.execute(
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (ks,)
    )
    present = {r[0] for r in tables}
    if "schema_version" in present:
        row = session.execute(version_sql).one()
    if row is None and not create:
        raise SchemaMismatch(f"keyspace {ks} has no shardcron schema: run `shardcron store init`")
    missing = sorted(set(TABLES) - present)
    if row is not None and missing and not create:
        raise SchemaMismatch(
            f"keyspace {ks} lacks table(s) {', '.join(missing)}: run `shardcron store init`"
        )
    if row is not None and missing:  # tables added since the keyspace was made
        for ddl in schema_cql(ks, due_ttl=due_ttl):
            session.execute(ddl)
    if row is not None:
        _add_columns(session, ks, create=create)
    if row is None:  # no schema yet, or one whose creation did not finish
        session.execute(keyspace_cql(ks, replication))
        for ddl in schema_cql(ks, due_ttl=due_ttl):
            session.execute(ddl)
        session.execute(
            f"INSERT INTO {ks}.schema_version (id, version, shard_count, bucket_seconds,"
            " created_at) VALUES (0, %s, %s, %s, %s) IF NOT EXISTS",
            (SCHEMA_VERSION, layout.shard_count, layout.bucket_seconds, int(time.time() * 1e6)),
        )
        row = session.execute(version_sql).one()
    check_schema(f"keyspace {ks}", tuple(row), layout=layout, version=SCHEMA_VERSION)


def _add_columns(session: Session, ks: str, *, create: bool) -> None:
    """Adds the ``ADDED_COLUMNS`` the keyspace lacks (``create``), or refuses it."""
    rows = session.execute(
        "SELECT table_name, column_name FROM system_schema.columns WHERE keyspace_name = %s",
        (ks,),
    )
    present = {(r[0], r[1]) for r in rows}
    lacking = [(t, c, kind) for t, c, kind in ADDED_COLUMNS if (t, c) not in present]
    if lacking and not create:
        names = ", ".join(f"{t}.{c}" for t, c, _ in lacking)
        raise SchemaMismatch(f"keyspace {ks} lacks column(s) {names}: run `shardcron store init`")
    for table, column, kind in lacking:
        session.execute(f"ALTER TABLE {ks}.{table} ADD IF NOT EXISTS {column} {kind}")

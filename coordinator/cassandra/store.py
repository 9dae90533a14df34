"""The cluster ``JobStore``: Apache Cassandra through cassandra-driver, driven from asyncio.

Schema and the reasons for its tables: ``schema``. How it keeps the
contract of ``store.py`` without a lock or a lightweight transaction (LWT) on the
hot path:

- Every statement is prepared once at ``open`` and runs at the configured
  consistency (default QUORUM); LWTs use SERIAL (LOCAL_SERIAL under a LOCAL_*
  consistency). A call returns once Cassandra acknowledged its writes.
- LWTs are used only for mutual exclusion between independent api processes:
  claiming an idempotency key on create (only when a key is given) and the
  version compare-and-set of ``update_job``.
- ``commit`` keeps the run upsert rule (never back to an earlier state) by reading
  the stored state of the runs it writes (cross-product reads over groups of job
  partitions, ``job_id IN ? AND id IN ?``), dropping regressions and then writing.
  This read-then-write is safe because the poller that owns a shard is the single
  writer of that shard's runs (store.py, "Write ownership"); the same read tells
  which runs are new (they get their ``runs_by_id`` row) and which dead letters to
  index or unindex. A poller's commit reads only the runs this store knows nothing
  of: the state it last wrote or read of the others stands for the read
  (``run_states`` says why that is never ahead of the store).
- A job's progress is plain column updates. The ACTIVE-only state rule reads the
  state first and writes the new state with the write time it read + 1 µs, so a
  user's update landing in between (a later timestamp) still wins.
- The poller's run rows and progress carry its ``write_time`` as their timestamp
  (``USING TIMESTAMP``): when it last confirmed it owns the shards. Cassandra keeps
  the cell with the latest timestamp whatever the order of arrival, so a commit
  that lands late (its process froze in the middle of it, its session expired, the
  shards moved) loses to every write of the next owner, which took them over only
  after that time; the single-writer rule above holds for what ends up stored. The
  api writes a new run with a timestamp one second before now (nothing writes a
  run before it exists), so the poller's first write of the run beats its creation
  even when the two hosts' clocks are a little apart.
- No request spans replica sets: a call's writes go as unlogged batches of the
  partitions that share their replicas (``batches``; the statements of one
  partition together, atomic and isolated in Cassandra), with no batch log, so each
  needs only a quorum of one replica set: with one node, a phase of a thousand
  partitions is a few requests, not a thousand. A logged batch needs two batch-log
  replicas besides the coordinator, chosen among the nodes it believes alive: with
  3 nodes a lost one is always chosen until the failure detector convicts it
  (15-20 s of batches failing with WriteTimeout BATCH_LOG). Requests of a call run
  concurrently (``max_concurrency`` in flight per store); plain writes are retried
  on timeouts and missing replicas for a few seconds, LWTs never (their caller
  reads the outcome).
- Writes of one call go in ordered phases (``writes``: which, and why in that
  order); a phase starts once every write of the previous one was acknowledged, and
  every prefix of the phases is a consistent store. A call that fails on the
  infrastructure can leave some of its phases written: a caller retries (creates
  with an idempotency key dedupe, see ``creates``; run writes are idempotent
  upserts). A call that fails on its input writes nothing: every row is encoded
  first.
- The due index is insert-only: rows expire (TTL = due time + ``due_ttl``), cursors
  only tell the poller where to start; nothing deletes due rows, so no reader ever
  walks tombstones of drained buckets. A cursor is written ``USING TIMESTAMP`` =
  its value, so a lower cursor loses without a read.
- Clocks: like any Cassandra application, this relies on the clocks of the
  shardcron hosts and the Cassandra nodes being NTP-synchronised (write timestamps
  order the writes of one row, including LWT ballots against plain writes).

The rules shared with the SQLite store (run-state order, page tokens, list filters,
job progress, layout) are ``coordinator/store_rules.py``; times are bigint
microseconds and "no value" a sentinel (``statements``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import UNSET_VALUE, tuple_factory

from shardcron.client.errors import NotFound, VersionConflict
from shardcron.client.types import Delivery, Job, JobState, OutputChunk, Page, Run, RunState
from shardcron.coordinator.cassandra import creates, output, reads
from shardcron.coordinator.cassandra.deliveries import (
    get_owner_settings,
    list_deliveries,
    list_owner_settings,
    pending_deliveries,
    plan_deliveries,
    put_owner_settings,
    save_deliveries,
)
from shardcron.coordinator.cassandra.schema import (
    DEFAULT_DUE_TTL,
    DEFAULT_REPLICATION,
    SCHEMA_VERSION,
    ensure_schema,
)
from shardcron.coordinator.cassandra.session import Cql
from shardcron.coordinator.cassandra.statements import LWT, prepare
from shardcron.coordinator.cassandra.writes import (
    MAX_TTL,
    P_JOBS,
    P_RUNS,
    P_STATES,
    WritePlanner,
    Writes,
    encode_runs,
    flush,
    now_us,
    progress_values,
)
from shardcron.coordinator.notify.settings import OwnerSettings
from shardcron.coordinator.rows import BadRowLog, _spec_to_json, _us
from shardcron.coordinator.store import (
    DEFAULT_BUCKET_SECONDS,
    DEFAULT_OUTPUT_CAP_BYTES,
    DEFAULT_SHARD_COUNT,
    ArtifactRef,
    DueEntry,
    JobProgress,
    NewJob,
)
from shardcron.coordinator.store_rules import StoreLayout, progress_write

# Each request is sent as soon as it is written (no Nagle). The driver leaves Nagle's
# algorithm on unless told; a process keeps many requests in flight on one
# connection, so a request written while an earlier one was unacknowledged waited
# for Cassandra's delayed ACK: a node's batches took several times what a client of
# their own measured at the same time (tests/test_cassandra_connections.py keeps it on).
SOCKOPTS = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class CassandraStore:
    """``JobStore`` on Apache Cassandra; see the module docstring."""

    def __init__(
        self,
        contact_points: Sequence[str],
        *,
        keyspace: str,
        consistency: str = "QUORUM",
        shard_count: int = DEFAULT_SHARD_COUNT,
        bucket_seconds: int = DEFAULT_BUCKET_SECONDS,
        output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES,
        replication: dict[str, Any] | None = None,
        due_ttl: timedelta = DEFAULT_DUE_TTL,
        max_concurrency: int = 64,
        port: int = 9042,
        request_timeout: float = 12.0,
        create_schema: bool = True,
        retention: timedelta | None = None,
    ) -> None:
        self.layout = StoreLayout(
            shard_count=shard_count,
            bucket_seconds=bucket_seconds,
            output_cap_bytes=output_cap_bytes,
        )
        if max_concurrency < 1 or due_ttl <= timedelta(0):
            raise ValueError("max_concurrency must be >= 1 and due_ttl positive")
        self.contact_points = list(contact_points)
        self.keyspace = keyspace
        # rows one list_owner_runs call scans at most (reads.OWNER_RUNS_SCAN_ROWS)
        self.owner_runs_scan_rows = reads.OWNER_RUNS_SCAN_ROWS
        self.consistency = ConsistencyLevel.name_to_value[consistency.upper()]
        self.serial_consistency = (
            ConsistencyLevel.LOCAL_SERIAL
            if consistency.upper().startswith("LOCAL_")
            else ConsistencyLevel.SERIAL
        )
        self.shard_count = shard_count
        self.bucket_seconds = bucket_seconds
        self.output_cap_bytes = output_cap_bytes
        self.replication = dict(replication or DEFAULT_REPLICATION)
        self.due_ttl = due_ttl
        self.port = port
        self.request_timeout = request_timeout
        # False for cluster nodes: the schema comes from `shardcron store init`, run once,
        # because nodes creating the same tables at the same moment can disagree on them.
        self.create_schema = create_schema
        # Final runs and output expire by TTL (schema docstring); expire_runs does nothing.
        self.retention = retention
        self._cluster: Cluster | None = None
        self._session: Session | None = None
        self._cql = Cql(consistency=self.consistency, max_concurrency=max_concurrency)
        self.bad_rows = BadRowLog()
        self._planner = WritePlanner(
            self._cql, bucket_seconds=bucket_seconds, due_ttl=due_ttl, retention=retention
        )

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        if self._session is not None:
            return
        await asyncio.to_thread(self._connect)

    async def close(self) -> None:
        cluster, self._cluster, self._session = self._cluster, None, None
        self._cql.detach()
        if cluster is not None:
            await asyncio.to_thread(cluster.shutdown)

    def _connect(self) -> None:
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
            consistency_level=self.consistency,
            serial_consistency_level=self.serial_consistency,
            request_timeout=self.request_timeout,
            row_factory=tuple_factory,
        )
        points: list[Any] = []
        for point in self.contact_points:
            host, _, port = point.partition(":")
            points.append((host, int(port)) if port else host)
        cluster = Cluster(
            points,
            port=self.port,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            protocol_version=5,
            sockopts=SOCKOPTS,
        )
        try:
            session = cluster.connect()
            ensure_schema(
                session,
                self.keyspace,
                layout=self.layout,
                replication=self.replication,
                due_ttl=self.due_ttl,
                create=self.create_schema,
            )
            session.set_keyspace(self.keyspace)
            self._cql.attach(session, prepare(session), LWT)
        except BaseException:
            cluster.shutdown()
            raise
        self._cluster, self._session = cluster, session

    async def _flush(self, writes: Writes) -> None:
        await flush(self._cql, writes)

    # --- jobs -------------------------------------------------------------

    async def create_jobs(self, items: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        return await creates.create_jobs(self._cql, self._planner, items, flush=self._flush)

    async def count_jobs(self, owner: str) -> int:
        await creates.counted_lately(self._cql)  # this node's own creates and deletes count first
        rows = (await self._cql.exec(self._cql.ps["count_jobs"], (owner,))).rows
        return max(0, rows[0][0] or 0) if rows else 0

    async def get_job(self, owner: str, job_id: str) -> Job:
        return await reads.get_job(self._cql, owner, job_id)

    async def get_jobs(self, job_ids: Sequence[str]) -> dict[str, Job]:
        return await reads.get_jobs(self._cql, job_ids, self.bad_rows)

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
        return await reads.list_jobs(
            self._cql,
            owner,
            states=states,
            name_prefix=name_prefix,
            labels=labels,
            page_size=page_size,
            page_token=page_token,
            bad_rows=self.bad_rows,
        )

    async def update_job(
        self,
        job: Job,
        *,
        expected_version: int,
        progress: JobProgress | None = None,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
    ) -> Job:
        fire_at, fire_key, failures = UNSET_VALUE, UNSET_VALUE, UNSET_VALUE
        if progress is not None:  # the poller's fields, written as given (no state rule)
            fire_at, fire_key, failures = progress_values(
                progress_write(progress, in_update=True).columns
            )
        values = (
            job.spec.name, str(job.state), expected_version + 1, job.schedule_version,
            _spec_to_json(job.spec), job.pause_reason, _us(job.updated_at),
            fire_at, fire_key, failures, job.id, job.owner, expected_version,
        )  # fmt: skip
        runs = list(runs)
        rows = encode_runs(runs)  # before the compare-and-set: bad input changes nothing
        # The one LWT of an update: compare-and-set on the version (user updates are rare).
        result = await self._cql.exec(self._cql.ps["update_job"], values)
        if not result.applied:
            if result.column("owner") != job.owner:
                raise NotFound(f"job {job.id} not found")
            stored = result.column("version")
            raise VersionConflict(f"job {job.id} is at version {stored}, not {expected_version}")
        writes = Writes()
        await self._planner.put_runs(writes, runs, rows, list(due), known_new=False)
        await self._flush(writes)
        if job.state == JobState.DELETED:
            # only a job that was not DELETED is updated (the api refuses the others),
            # and this compare-and-set applied: it left the count of live jobs
            creates.count_jobs_later(self._cql, {job.owner: -1})
        return await self.get_job(job.owner, job.id)

    # --- runs -------------------------------------------------------------

    async def commit(
        self,
        *,
        runs: Sequence[Run] = (),
        due: Sequence[Run] = (),
        progress: Sequence[JobProgress] = (),
        write_time: datetime | None = None,
        durable: Callable[[Collection[str]], None] | None = None,
        deliveries: Sequence[Delivery] = (),
    ) -> None:
        """The state changes of runs whose jobs have no other write in the call are
        written first and named to ``durable`` once acknowledged (``Writes.early``): a
        turn's new leases go out after one round trip, not after the ordered phases;
        so are those of jobs whose only other write is their progress, with it (a one-off
        job's end: its run's final record and its COMPLETED state, one mutation), which
        they are written beside even when no ``durable`` waits for them. Nothing of the
        jobs is read (``WritePlanner.plan_progress``)."""
        runs, due, progress = list(runs), list(due), list(progress)
        if not (runs or due or progress or deliveries):
            return
        write_us = None if write_time is None else _us(write_time)
        rows = encode_runs(runs)  # before anything is read or written
        writes = Writes()
        plan_deliveries(self._cql, writes, deliveries)  # before the runs' final records
        await self._planner.put_runs(writes, runs, rows, due, known_new=False, write_us=write_us)
        at = now_us() if write_us is None else write_us
        later = {p.job_id: p for p in progress}
        early, ids, joined = writes.early(later)
        for job_id in joined:  # its progress and its runs' states: one mutation
            self._planner.plan_progress(early, later.pop(job_id), at, phase=P_STATES)
        progress = list(later.values())
        # written ahead when a caller waits for them and more phases follow
        if durable is not None and ids and (writes or progress):
            await self._flush(early)
            durable(ids)
        else:
            writes.parts.update(early.parts)
        for p in progress:
            self._planner.plan_progress(writes, p, at)
        await self._flush(writes)

    async def get_run(self, owner: str, run_id: str) -> Run:
        return await reads.get_run(self._cql, owner, run_id)

    async def get_runs(
        self, run_ids: Sequence[str], *, job_ids: Mapping[str, str] | None = None
    ) -> dict[str, Run]:
        return await reads.get_runs(self._cql, run_ids, self.bad_rows, job_ids)

    async def list_runs(
        self,
        owner: str,
        job_id: str,
        *,
        states: frozenset[RunState] = frozenset(),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        return await reads.list_runs(
            self._cql,
            owner,
            job_id,
            states=states,
            page_size=page_size,
            page_token=page_token,
            bad_rows=self.bad_rows,
        )

    async def list_owner_runs(
        self,
        owner: str,
        *,
        states: frozenset[RunState] = frozenset(),
        page_size: int = 100,
        page_token: str = "",
    ) -> Page[Run]:
        return await reads.list_owner_runs(
            self._cql,
            owner,
            states=states,
            page_size=page_size,
            page_token=page_token,
            bad_rows=self.bad_rows,
            scan_rows=self.owner_runs_scan_rows,
        )

    async def list_active_runs(self, job_id: str) -> list[Run]:
        return await reads.list_active_runs(self._cql, job_id, self.bad_rows)

    async def save_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        await save_deliveries(self._cql, deliveries)

    async def pending_deliveries(self, shard: int, *, limit: int = 1000) -> list[Delivery]:
        return await pending_deliveries(self._cql, shard, limit)

    async def list_deliveries(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Delivery]:
        return await list_deliveries(
            self._cql, owner, job_id=job_id, page_size=page_size, page_token=page_token
        )

    async def put_owner_settings(self, settings: OwnerSettings) -> None:
        await put_owner_settings(self._cql, settings)

    async def get_owner_settings(self, owner: str) -> OwnerSettings | None:
        return await get_owner_settings(self._cql, owner)

    async def list_owner_settings(self) -> list[OwnerSettings]:
        return await list_owner_settings(self._cql)

    async def list_dead_letters(
        self, owner: str, *, job_id: str = "", page_size: int = 100, page_token: str = ""
    ) -> Page[Run]:
        return await reads.list_dead_letters(
            self._cql,
            owner,
            job_id=job_id,
            page_size=page_size,
            page_token=page_token,
            bad_rows=self.bad_rows,
        )

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
        return await reads.scan_due(
            self._cql,
            shard,
            bucket_seconds=self.bucket_seconds,
            due_from=due_from,
            due_until=due_until,
            after=after,
            limit=limit,
        )

    async def load_cursors(self, shards: Sequence[int]) -> dict[int, datetime]:
        return await reads.load_cursors(self._cql, shards)

    async def save_cursors(self, cursors: dict[int, datetime]) -> None:
        # USING TIMESTAMP = the cursor: Cassandra keeps the cell with the highest
        # timestamp, so a lower cursor is ignored, with no read and no LWT.
        writes = Writes()
        for shard, at in cursors.items():
            us = _us(at)
            stmt = self._cql.bind("save_cursor", (shard, us, max(us, 1)))
            writes.add(P_RUNS, ("shard_cursors", shard), stmt, 40)
        if writes:
            await self._flush(writes)

    async def add_artifact_refs(self, refs: Sequence[ArtifactRef]) -> None:
        await self._artifact_refs("add_artifact_ref", refs)

    async def artifact_refs(self, owner: str, sha256: str, *, limit: int = 100) -> list[str]:
        if limit < 1:
            return []
        rows = []
        params = (owner, sha256, limit)
        async for page in self._cql.pages(self._cql.ps["artifact_refs"], params):
            rows.extend(job_id for (job_id,) in page)
        return rows

    async def remove_artifact_refs(self, refs: Sequence[ArtifactRef]) -> None:
        await self._artifact_refs("remove_artifact_ref", refs)

    async def _artifact_refs(self, statement: str, refs: Sequence[ArtifactRef]) -> None:
        writes = Writes()
        for r in refs:
            stmt = self._cql.bind(statement, (r.owner, r.sha256, r.job_id))
            writes.add(P_JOBS, ("artifact_refs", r.owner, r.sha256), stmt, 200)
        if writes:
            await self._flush(writes)

    async def oldest_due(self, shard: int) -> datetime | None:
        return await reads.oldest_due(self._cql, shard, bucket_seconds=self.bucket_seconds)

    # --- output -------------------------------------------------------------

    async def append_output(self, chunks: Sequence[OutputChunk]) -> None:
        await output.append_output(
            self._cql, chunks, cap=self.output_cap_bytes, ttl=self._output_ttl()
        )

    def _output_ttl(self) -> int:
        if self.retention is None:
            return 0
        ttl = max(1, int(self.retention.total_seconds()))
        return 0 if ttl > MAX_TTL else ttl

    async def expire_runs(self, now: datetime) -> list[tuple[str, str]]:
        return []  # the rows carry their TTL (schema docstring)

    async def read_output(
        self, run_id: str, *, offset: int = 0, limit: int = 1 << 16
    ) -> list[OutputChunk]:
        return await output.read_output(self._cql, run_id, offset=offset, limit=limit)


async def init_schema(
    contact_points: Sequence[str],
    *,
    keyspace: str,
    replication: dict[str, Any] | None = None,
    shard_count: int | None = None,
    bucket_seconds: int | None = None,
    due_ttl: timedelta = DEFAULT_DUE_TTL,
    consistency: str = "QUORUM",
) -> int:
    """``shardcron store init``: creates the keyspace and schema if missing; returns the
    schema version. Idempotent. Raises ``SchemaMismatch`` when the keyspace holds another
    schema version or another shard count / bucket size than the ones given."""
    store = CassandraStore(
        list(contact_points),
        keyspace=keyspace,
        replication=replication or DEFAULT_REPLICATION,
        shard_count=shard_count or DEFAULT_SHARD_COUNT,
        bucket_seconds=bucket_seconds or DEFAULT_BUCKET_SECONDS,
        due_ttl=due_ttl,
        consistency=consistency,
    )
    await store.open()
    await store.close()
    return SCHEMA_VERSION


def init_schema_sync(contact_points: Sequence[str], **kwargs: Any) -> int:
    """``init_schema`` for a caller without an event loop (a click command)."""
    return asyncio.run(init_schema(contact_points, **kwargs))

"""Cassandra requests from asyncio: one statement, its pages, concurrent chunks, batches.

A request runs with at most ``max_concurrency`` in flight per store and caller: the
poller's requests have a limit of their own (``store_lanes``). Every statement
but a lightweight transaction (LWT) is idempotent here (upserts of whole values,
reads), so a timeout or a missing replica is retried after a short backoff (a read
a few times, a plain write for a few seconds of trouble); an LWT is never retried:
its caller reads the outcome.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from cassandra import OperationTimedOut, ReadTimeout, WriteTimeout
from cassandra import Unavailable as CassandraUnavailable
from cassandra.cluster import ResponseFuture, Session
from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement

from shardcron.coordinator.cassandra.binding import Binder
from shardcron.coordinator.cassandra.run_jobs import RunJobs
from shardcron.coordinator.cassandra.run_states import RunStates
from shardcron.coordinator.store_lanes import Lanes
from shardcron.coordinator.store_rules import resolve_future

T = TypeVar("T")

_IN_CHUNK = 100  # keys per multi-partition IN
_CROSS = 256  # (partition, row) pairs per cross-product read
_RETRY_BACKOFF = (0.05, 0.2, 0.8)  # seconds before each retry of an idempotent read
_WRITE_BACKOFF = (0.05, 0.2, 0.5, 1.0, 2.0)  # of a plain write: a few seconds of trouble
_RETRYABLE = (WriteTimeout, ReadTimeout, CassandraUnavailable, OperationTimedOut)


def _unlink(rf: ResponseFuture) -> None:
    """Drops what ties a finished request to itself: the callbacks it holds (which name
    it) and its timeout timer (whose callback is its own method). It is then freed as
    soon as it is done with, rows and all, not left to the cyclic collector: each
    request left dozens of objects of cyclic garbage, and under a steady load a cluster
    node's young collections then freed them by the ten thousand, each a pause."""
    rf.clear_callbacks()
    rf._timer = None  # cancelled by the driver before the callbacks run


class Replies:
    """Hands requests' outcomes from the driver's IO thread to one event loop, many to a
    wake-up: each outcome is queued, and the loop is woken only when no hand-over is
    already on its way (``call_soon_threadsafe`` wrote to the loop's wake-up pipe for
    every reply: under load a syscall and a loop turn each, where one serves all the
    replies that came meanwhile)."""

    __slots__ = ("loop", "_queue", "_armed", "_lock")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: collections.deque[tuple[asyncio.Future[Any], bool, Any]] = collections.deque()
        self._armed = False
        self._lock = threading.Lock()

    def put(self, future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        """From any thread."""
        self._queue.append((future, ok, value))
        with self._lock:
            if self._armed:
                return  # the hand-over on its way takes this one too
            self._armed = True
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self.loop.call_soon_threadsafe(self._hand_over)

    def _hand_over(self) -> None:
        with self._lock:
            self._armed = False  # a reply queued from now on wakes the loop again
        queue = self._queue
        while queue:
            resolve_future(*queue.popleft())


def chunks(values: Sequence[T], n: int) -> Iterable[Sequence[T]]:
    for i in range(0, len(values), n):
        yield values[i : i + n]


@dataclasses.dataclass(slots=True)
class Result:
    rows: list[tuple[Any, ...]]
    columns: list[str]
    paging_state: bytes | None

    @property
    def applied(self) -> bool:
        """An LWT's ``[applied]``."""
        return bool(self.rows and self.rows[0][0])

    def column(self, name: str) -> Any:
        return self.rows[0][self.columns.index(name)] if name in self.columns else None


class Cql:
    """The requests of one store: its session, its prepared statements (by name) and
    its limit of requests in flight. Unusable until ``attach``."""

    def __init__(self, *, consistency: int, max_concurrency: int) -> None:
        self.consistency = consistency
        self.max_concurrency = max_concurrency
        self.ps: dict[str, PreparedStatement] = {}
        self._binders: dict[str, Binder] = {}
        self._session: Session | None = None
        self._lanes: Lanes | None = None
        self._replies: Replies | None = None  # to the loop of the newest request
        # the driver's map of the keyspace's tokens to replicas seen last (``replicas``),
        # and the one set of replicas all its tokens have, if so
        self._mapped: object = None
        self._only: frozenset[Any] | None = None
        self._lwt: list[PreparedStatement] = []
        # this store's job-counter updates under way (``creates.count_jobs_later``),
        # kept referenced until done
        self.counting: set[asyncio.Task[None]] = set()
        self.run_jobs = RunJobs()  # the job of each run this store has seen
        self.run_states = RunStates()  # the stored state of each, as last written or read

    def attach(
        self, session: Session, prepared: dict[str, PreparedStatement], lwt: Sequence[str]
    ) -> None:
        self.ps = prepared
        self._binders = {name: Binder(ps) for name, ps in prepared.items()}
        self._lwt = [prepared[name] for name in lwt]
        self._lanes = Lanes(self.max_concurrency)  # bound to a loop on first use
        self._session = session

    def detach(self) -> None:
        self._session = None

    def bind(self, name: str, values: Sequence[Any]) -> BoundStatement:
        return self._binders[name](values)

    def replicas(self, stmt: BoundStatement) -> Hashable:
        """A key equal for statements whose partitions are held by the same nodes (the
        set of replicas, from the driver's token map); without a token map, the
        partition's routing key (one token, so one set of replicas). Where every token
        range of the keyspace has the same replicas (one node, or as many replicas as
        nodes) that set, without hashing the key (``_only_replicas``)."""
        key = stmt.routing_key
        session = self._session
        if session is not None and key is not None:
            only = self._only_replicas(session)
            if only is not None:
                return only
            hosts = session.cluster.metadata.get_replicas(session.keyspace, key)
            if hosts:
                return frozenset(hosts)
        return key if key is not None else id(stmt)

    def _only_replicas(self, session: Session) -> frozenset[Any] | None:
        """The one set of replicas every token range of the keyspace has, or None: there
        are several, or the driver has not mapped the keyspace yet. Worked out again
        whenever the driver's map of the keyspace is another object (the driver builds a
        new one on a change of topology or replication, never changes one in place)."""
        token_map = session.cluster.metadata.token_map
        mapped = token_map.tokens_to_hosts_by_ks.get(session.keyspace) if token_map else None
        if not mapped:
            return None
        if mapped is not self._mapped:
            sets = {frozenset(hosts) for hosts in list(mapped.values())}
            only = sets.pop() if len(sets) == 1 else None
            self._only = only or None  # an empty set names no replica
            self._mapped = mapped
        return self._only

    async def exec(
        self,
        stmt: Any,
        params: Any = None,
        paging_state: bytes | None = None,
        *,
        backoff: Sequence[float] = _RETRY_BACKOFF,
    ) -> Result:
        """Runs one statement (one page of it); retries all but an LWT (module docstring)."""
        prepared = stmt.prepared_statement if isinstance(stmt, BoundStatement) else stmt
        lwt = any(prepared is p for p in self._lwt)
        for attempt in range(1 if lwt else len(backoff) + 1):
            try:
                return await self._exec_once(stmt, params, paging_state)
            except _RETRYABLE:
                if lwt or attempt == len(backoff):
                    raise
                await asyncio.sleep(backoff[attempt])
        raise AssertionError("unreachable")

    async def _exec_once(self, stmt: Any, params: Any, paging_state: bytes | None) -> Result:
        session, lanes = self._session, self._lanes
        if session is None or lanes is None:
            raise RuntimeError("CassandraStore is not open")
        loop = asyncio.get_running_loop()
        replies = self._replies
        if replies is None or replies.loop is not loop:
            replies = self._replies = Replies(loop)
        async with lanes.current():
            future: asyncio.Future[Result] = loop.create_future()
            rf = session.execute_async(stmt, params, paging_state=paging_state)

            def ok(rows: list[tuple[Any, ...]]) -> None:
                result = Result(list(rows or ()), list(rf._col_names or ()), rf._paging_state)
                _unlink(rf)
                replies.put(future, True, result)

            def err(exc: BaseException) -> None:
                _unlink(rf)
                replies.put(future, False, exc)

            # the errback first: a response that came before the callback was added
            # runs it at once, and then nothing is left on the request to tie it
            rf.add_errback(err)
            rf.add_callback(ok)
            return await future

    async def all(self, stmt: Any, params: Any = None) -> list[tuple[Any, ...]]:
        """Every row, following pages."""
        result = await self.exec(stmt, params)
        rows = result.rows
        while result.paging_state:
            result = await self.exec(stmt, params, result.paging_state)
            rows += result.rows
        return rows

    async def pages(self, stmt: Any, params: Any) -> Any:
        """Async iterator over the pages of a statement."""
        result = await self.exec(stmt, params)
        yield result.rows
        while result.paging_state:
            result = await self.exec(stmt, params, result.paging_state)
            yield result.rows

    @staticmethod
    async def gather(calls: Iterable[Any]) -> list[Any]:
        return list(await asyncio.gather(*calls))

    async def in_(self, name: str, keys: Sequence[Any], *prefix: Any) -> list[tuple[Any, ...]]:
        """Rows of a ``... IN ?`` statement over ``keys``, in chunks run concurrently."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        stmt = self.ps[name]
        parts = await self.gather(
            self.all(stmt, (*prefix, list(chunk))) for chunk in chunks(keys, _IN_CHUNK)
        )
        return [row for part in parts for row in part]

    async def cross(self, name: str, by_partition: Mapping[Any, Iterable[Any]]) -> list[Any]:
        """Rows of a ``... WHERE <partition key> IN ? AND <clustering key> IN ?`` statement
        for the keys of ``by_partition`` (partition -> its row keys): one read per group
        of partitions, groups kept to about ``_CROSS`` (partition, row) pairs, the reads
        run concurrently. Where a row key exists under one partition only (a run id), the
        cross product finds exactly the wanted rows, with a request per group instead of
        one per partition."""
        groups: list[tuple[list[Any], list[Any]]] = []
        partitions: list[Any] = []
        keys: list[Any] = []
        for partition, row_keys in by_partition.items():
            row_keys = list(row_keys)
            if partitions and (len(partitions) + 1) * (len(keys) + len(row_keys)) > _CROSS:
                groups.append((partitions, keys))
                partitions, keys = [], []
            partitions.append(partition)
            keys += row_keys
        if partitions:
            groups.append((partitions, keys))
        stmt = self.ps[name]
        parts = await self.gather(self.all(stmt, group) for group in groups)
        return [row for part in parts for row in part]

    @staticmethod
    async def all_written(calls: Iterable[Any]) -> None:
        """Awaits every write; on the first failure cancels the others (no retry of them
        lands after the call failed: its caller may reload and write again) and raises."""
        tasks = [asyncio.ensure_future(call) for call in calls]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def send(self, statements: list[BoundStatement]) -> None:
        """Statements of partitions held by the same replicas (``batches``): alone, or as
        an unlogged batch (no batch log; atomic and isolated per partition)."""
        if len(statements) == 1:
            await self.exec(statements[0], backoff=_WRITE_BACKOFF)
            return
        batch = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=self.consistency)
        for stmt in statements:
            batch.add(stmt)
        await self.exec(batch, backoff=_WRITE_BACKOFF)

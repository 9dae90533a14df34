"""S1: what a user waits on with many jobs stored (issue 37). ``n`` one-shot no-op jobs,
due hours ahead (``S1_DUE_AHEAD_S``, spread over an hour), are created on a fresh node;
then, with them stored, each figure of ``S1_FIGURES`` is measured on that node (a
``RestartableNode``: the embedded one, ``shardcron_embedded``, or the cluster,
``shardcron_cluster``; each says in its docstring and ``describe`` which processes its
memory, store size, kill and restart take in):

- the create rate over the first tenth and over all the jobs created past the first
  ``S1_BASELINE`` (``CreateJobs`` batches, as the other workloads submit);
- the node's resident memory (the embedded node's process and every descendant, the
  SQLite writer; the cluster's shardcron nodes, summed) and the store's size per job
  (every file of the embedded data dir, WAL included, as it stands; Cassandra's
  keyspace, flushed); a store server's own memory (Cassandra) apart, when there is one;
- what the CLI and the dashboard ask for, each call ``CALLS`` times in a row (the first
  call and the median are reported): ``job list``'s first page (101 jobs with health),
  ``run list --state PENDING``'s (20 runs), ``cluster status``, and over HTTP
  ``GET /v1/jobs?withHealth=true`` and ``GET /v1/overview``; once with the first
  ``S1_BASELINE`` jobs stored, once with all ``n``, so a page that grows with the jobs
  stored shows;
- ``S1_CRONS`` every-minute crons created beside the stored jobs, watched for
  ``S1_MINUTES`` whole minutes: each fire's first start minus its minute
  (``bench.workloads.fire_errors``), p50/p99 in ``Result.lag``;
- restart: the node is sent SIGKILL (``kill``: the embedded node's process group, or
  every shardcron node of the cluster), started again on the same store (``restart``),
  and the time until its first ``job list`` page is answered is taken.

Over HTTP the node's own credentials are sent (``http_headers``, ``http_ssl``: none for
the embedded node, the admin token and the client certificate for the cluster), with
the owner header, so the same calls serve both.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol

from bench.common import Result, percentiles
from bench.systems.shardcron_workloads import POLL, SETTLE, Node, submit
from bench.workloads import (
    S1_BASELINE,
    S1_CRONS,
    S1_DUE_AHEAD_S,
    S1_MINUTES,
    W4_CRON,
    fire_errors,
    minute_marks,
    timing,
    with_baseline,
)
from shardcron.client import AsyncClient
from shardcron.client.types import OWNER_HEADER, HandlerTask, JobSpec, RunState, Schedule

CALLS = 10  # times each page is asked for in a row
DUE_SPREAD = 60  # the stored jobs' due instants: one a minute over an hour
RESTART_TIMEOUT = 300.0  # seconds a restarted node may take to serve
OWNER = "bench"


class RestartableNode(Node, Protocol):
    """A node S1 can weigh and crash: its HTTP edge, memory, store size, a restart."""

    http_url: str
    http_headers: Mapping[str, str]  # sent with every HTTP call (e.g. a bearer token)
    http_ssl: ssl.SSLContext | None  # for an https ``http_url``

    def rss_bytes(self) -> int: ...
    def store_server_rss_bytes(self) -> int | None: ...  # None: no store server apart
    def store_bytes(self) -> int: ...
    def kill(self) -> None: ...  # SIGKILL, no shutdown
    def restart(self) -> None: ...  # a new node process on the same store, not waited for


def stored_specs(n: int, now: float) -> list[JobSpec]:
    """``n`` no-op one-shot jobs due ``S1_DUE_AHEAD_S`` after ``now``, over the hour that
    follows (``DUE_SPREAD`` instants, so the store's due index is not one key)."""
    task = HandlerTask(name="noop")
    kinds = [
        JobSpec(
            name="s1",
            task=task,
            schedule=Schedule.once_at(datetime.fromtimestamp(now + S1_DUE_AHEAD_S + 60.0 * i, UTC)),
        )
        for i in range(DUE_SPREAD)
    ]
    return [kinds[i % DUE_SPREAD] for i in range(n)]


async def _timed(call: Callable[[], Awaitable[object]], calls: int = CALLS) -> dict[str, float]:
    samples = []
    for _ in range(calls):
        began = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - began)
    return timing(samples)


def _get(url: str, headers: Mapping[str, str], context: ssl.SSLContext | None) -> None:
    """GET ``url`` as ``OWNER`` with ``headers`` (the node's credentials), the body read."""
    request = urllib.request.Request(url, headers={**headers, OWNER_HEADER: OWNER})
    with urllib.request.urlopen(request, timeout=60, context=context) as r:
        r.read()


async def _pages(node: RestartableNode) -> dict[str, float]:
    """Each page's timing with the jobs stored, in ms."""
    client = AsyncClient(node.targets[0], owner=OWNER, timeout=60)
    try:
        jobs = await _timed(lambda: client.list_jobs(page_size=101, with_health=True))
        pending = await _timed(lambda: client.list_runs(states=[RunState.PENDING], page_size=20))
        status = await _timed(client.cluster_status)
    finally:
        await client.close()

    def get(path: str) -> Awaitable[None]:
        return asyncio.to_thread(_get, node.http_url + path, node.http_headers, node.http_ssl)

    http_jobs = await _timed(lambda: get("/v1/jobs?withHealth=true"))
    overview = await _timed(lambda: get("/v1/overview"))
    return {
        "job_list_first_ms": jobs["first"] * 1000,
        "job_list_ms": jobs["median"] * 1000,
        "run_list_pending_ms": pending["median"] * 1000,
        "cluster_status_ms": status["median"] * 1000,
        "http_jobs_ms": http_jobs["median"] * 1000,
        "http_overview_ms": overview["median"] * 1000,
    }


async def _served(target: str, deadline: float) -> None:
    """Until ``target`` answers a ``job list`` page (or ``deadline``, monotonic)."""
    while True:
        client = AsyncClient(target, owner=OWNER, timeout=5)
        try:
            await client.list_jobs(page_size=101, with_health=True)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
        finally:
            await client.close()


def _crons(node: RestartableNode) -> tuple[list[float], int, list[float]]:
    """``S1_CRONS`` every-minute crons, watched ``S1_MINUTES`` whole minutes: (each fire's
    signed error, fires missed, the minutes)."""
    spec = JobSpec(
        name="s1-cron", task=HandlerTask(name="noop"), schedule=Schedule.cron_expr(W4_CRON)
    )
    asyncio.run(submit(node.targets, [spec] * S1_CRONS, 1))
    marks = minute_marks(time.time(), S1_MINUTES)
    time.sleep(max(0.0, marks[-1] - time.time()))
    end = time.time() + SETTLE
    while True:
        errors, missed = fire_errors(node.run_times("s1-cron"), marks)
        if missed == 0 or time.time() >= end:
            return errors, missed, marks
        time.sleep(POLL)


def s1(node: RestartableNode, n: int) -> Result:
    """S1 on a fresh ``node``: ``n`` jobs stored, then each figure of ``S1_FIGURES``."""
    figures: dict[str, float] = {}
    try:
        node.start()
        node.wait_workers()
        specs = stored_specs(n, time.time())
        base = min(S1_BASELINE, n // 2)
        asyncio.run(submit(node.targets, specs[:base], node.in_flight))
        baseline = asyncio.run(_pages(node))
        timed = n - base
        tenth = base + max(1, timed // 10)
        first, tenth_acked = asyncio.run(submit(node.targets, specs[base:tenth], node.in_flight))
        _, last_ack = asyncio.run(submit(node.targets, specs[tenth:], node.in_flight))
        figures["create_first_tenth_per_s"] = (tenth - base) / max(tenth_acked - first, 1e-9)
        figures["create_per_s"] = timed / max(last_ack - first, 1e-9)
        figures["rss_mb"] = node.rss_bytes() / 2**20
        server_rss = node.store_server_rss_bytes()
        if server_rss is not None:
            figures["store_server_rss_mb"] = server_rss / 2**20
        figures["store_bytes_per_job"] = node.store_bytes() / n
        figures = with_baseline({**figures, **asyncio.run(_pages(node))}, baseline)
        errors, missed, marks = _crons(node)
        lag = percentiles(errors)
        if lag:
            figures["cron_fire_p50_ms"] = lag["p50"] * 1000
            figures["cron_fire_p99_ms"] = lag["p99"] * 1000
        node.kill()
        began = time.monotonic()
        node.restart()
        asyncio.run(_served(node.targets[0], began + RESTART_TIMEOUT))
        figures["restart_s"] = time.monotonic() - began
    finally:
        node.stop()
    return Result(
        system=node.system,
        workload="S1",
        n=n,
        config=node.describe("S1") + f"; {n:,} one-shot no-op jobs due {S1_DUE_AHEAD_S / 3600:.0f}-"
        f"{S1_DUE_AHEAD_S / 3600 + 1:.0f} h ahead; {S1_CRONS:,} crons '{W4_CRON}' (UTC),"
        f" {len(marks)} whole minutes watched",
        config_id=node.config_id,
        submit_rate=figures["create_per_s"],
        lag=lag,
        completed=len(errors),
        missed=missed,
        figures=figures,
        notes=f"pages: each asked {CALLS} times in a row; fire error = first start - the"
        " minute (signed), read from the store; restart: SIGKILL (the embedded node's"
        " process group; every node of a cluster), the same node processes started again"
        " on the same store, timed to the first job list page",
    )

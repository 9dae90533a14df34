"""shardcron's timed workloads on one node (``shardcron_embedded``'s): W3, open-loop
arrivals each due 0-5 s after submit, and W4, a fleet of every-minute cron jobs.

- W3 submits on a timetable (``bench.workloads.arrivals``), never waiting for acks
  before the next submit: what the clients of a busy service do. Every rate runs on the
  same node, one after the other, each under its own job name. Start lag is the
  worker's ``started_at`` minus the instant the job was due (``fire_at``), read from
  the store, so a submit acknowledged late counts against the rate.
- W4 creates the fleet, then watches the whole minutes that follow; a fire is the run
  of attempt 1 for (job, minute). Missed: a (job, minute) with no started run;
  duplicate: more than one run for one (job, minute). Fire error: how far ``started_at``
  is from the minute, either way (runs are leased ahead of their instant: one that
  started early would count as late does).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from bench.common import CpuMeter, Result, metric_total, per_1000, percentiles, wait_ended
from bench.workloads import W4_CRON, Plan, arrivals, due_batches, minute_marks
from shardcron.client import AsyncClient
from shardcron.client.types import HandlerTask, JobSpec, Schedule

SYSTEM = "shardcron (embedded)"
TICK = 0.02  # seconds between W3 submit rounds
BATCH = 1000  # jobs per CreateJobs call, at most
SETTLE = 10.0  # W3/W4: seconds past the last due instant allowed for runs to end
POLL = 0.1


class Node(Protocol):
    target: str
    dir: Path

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def cpu(self) -> CpuMeter: ...
    def wait_workers(self, timeout: float = ...) -> None: ...
    @property
    def metrics(self) -> list[str]: ...


async def _open_loop(target: str, name: str, rate: float, seconds: float) -> tuple[float, float]:
    """Submits ``rate`` jobs/s for ``seconds`` on the arrival timetable, without waiting
    for acks; returns (start, last ack)."""
    schedule = arrivals(rate, seconds)
    task = HandlerTask(name="noop")
    client = AsyncClient(target, owner="bench", timeout=120)
    calls: list[asyncio.Task[Any]] = []
    start, sent = time.time(), 0
    try:
        while sent < len(schedule):
            batch, sent = due_batches(schedule, time.time() - start, sent)
            specs = [
                JobSpec(
                    name=name,
                    task=task,
                    schedule=Schedule.once_at(datetime.fromtimestamp(start + due, UTC)),
                )
                for _, due in batch
            ]
            for i in range(0, len(specs), BATCH):
                calls.append(asyncio.create_task(client.create_job_ids(specs[i : i + BATCH])))
            await asyncio.sleep(TICK)
        await asyncio.gather(*calls)
        return start, time.time()
    finally:
        await client.close()


def _rows(db: Path, sql: str, args: tuple[Any, ...]) -> list[Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _lags(db: Path, name: str) -> list[float]:
    rows = _rows(
        db,
        "SELECT r.started_at - r.fire_at FROM runs r JOIN jobs j ON j.id = r.job_id "
        "WHERE j.name = ? AND r.started_at IS NOT NULL",
        (name,),
    )
    return [r[0] / 1e6 for r in rows]


def w3(node: Node, plan: Plan) -> list[Result]:
    results = []
    ended_before = 0
    try:
        node.start()
        node.wait_workers()
        for rate in plan.w3_rates:
            name = f"w3-{rate}"
            jobs = int(rate * plan.w3_seconds)
            meter = node.cpu()
            meter.start()
            start, last_ack = asyncio.run(_open_loop(node.target, name, rate, plan.w3_seconds))
            timeout = max(0.0, start + plan.w3_seconds + 5.0 - time.time()) + SETTLE
            done, _ = wait_ended(node.metrics, ended_before + jobs, timeout, POLL)
            cpu = meter.stop()
            ended = done - ended_before
            ended_before = done
            lags = _lags(node.dir / "data" / "shardcron.db", name)
            results.append(
                Result(
                    system=SYSTEM,
                    workload="W3",
                    n=jobs,
                    rate=float(rate),
                    config=f"one `shardcron dev` node; open-loop CreateJobs every {TICK * 1000:.0f}"
                    " ms, each job due 0-5 s after its submit",
                    config_id="embedded",
                    submit_rate=jobs / max(last_ack - start, 1e-9),
                    lag=percentiles(lags),
                    cpu_per_1000=per_1000(cpu, jobs),
                    completed=min(ended, len(lags)),
                    notes="lag = started_at - due instant (fire_at), from the store",
                )
            )
    finally:
        node.stop()
    return results


def _fires(db: Path, marks: list[float]) -> list[tuple[str, int, int | None]]:
    """(job id, fire_at in µs, started_at in µs or None) of every run of the marks."""
    wanted = [int(m * 1_000_000) for m in marks]
    holes = ",".join("?" * len(wanted))
    return _rows(
        db,
        "SELECT r.job_id, r.fire_at, r.started_at FROM runs r JOIN jobs j ON j.id = r.job_id "
        f"WHERE j.name = 'w4' AND r.attempt = 1 AND r.fire_at IN ({holes})",
        tuple(wanted),
    )


def w4(node: Node, jobs: int, plan: Plan) -> Result:
    spec = JobSpec(name="w4", task=HandlerTask(name="noop"), schedule=Schedule.cron_expr(W4_CRON))
    try:
        node.start()
        node.wait_workers()
        meter = node.cpu()
        meter.start()

        async def create() -> None:
            client = AsyncClient(node.target, owner="bench", timeout=120)
            try:
                for i in range(0, jobs, BATCH):
                    await client.create_job_ids([spec] * min(BATCH, jobs - i))
            finally:
                await client.close()

        asyncio.run(create())
        marks = minute_marks(time.time(), plan.w4_minutes)
        expected = jobs * len(marks)
        time.sleep(max(0.0, marks[0] - 1.0 - time.time()))
        before = int(metric_total(node.metrics, "shardcron_runs_final_total"))
        time.sleep(max(0.0, marks[-1] - time.time()))
        wait_ended(node.metrics, before + expected, SETTLE, POLL)
        cpu = meter.stop()
        rows = _fires(node.dir / "data" / "shardcron.db", marks)
    finally:
        node.stop()
    per_fire: dict[tuple[str, int], list[int | None]] = {}
    for job_id, fire_at, started_at in rows:
        per_fire.setdefault((job_id, fire_at), []).append(started_at)
    started = {k: [s for s in v if s is not None] for k, v in per_fire.items()}
    fired = sum(1 for v in started.values() if v)
    errors = [abs(min(v) - fire_at) / 1e6 for (_, fire_at), v in started.items() if v]
    return Result(
        system=SYSTEM,
        workload="W4",
        n=expected,
        config=f"one `shardcron dev` node; {jobs:,} jobs on cron '{W4_CRON}' (UTC), "
        f"{len(marks)} whole minutes watched",
        config_id="embedded",
        lag=percentiles(errors),
        cpu_per_1000=per_1000(cpu, expected),
        completed=fired,
        missed=expected - fired,
        duplicates=sum(len(v) - 1 for v in per_fire.values() if len(v) > 1),
        notes="fire error = |started_at - the minute|; CPU from the first create",
    )

"""Celery + Redis on the timed workloads: W3 (open-loop arrivals, each task with
``eta`` 0-5 s after its submit) and W4 (a fleet of every-minute entries in Celery beat).

- W3 runs each rate on fresh servers (``celery_redis.servers``) and submits on the
  same timetable as shardcron (``bench.workloads.arrivals``) with ``apply_async(eta=...)``
  from one producer; start lag is the task's start (its result) minus its eta. Rates
  stop after the first not held, as shardcron's and Temporal's do.
- W4 starts ``celery beat`` beside the worker with one ``crontab()`` entry per job
  (``celery_tasks``), watches the whole minutes that follow, and reads every result
  (job, start) from the result db: a fire belongs to the minute its task started in,
  so a fire more than a minute late would count as missed and as a fire of the next
  minute. Missed: a (job, minute) with no result; duplicate: more than one.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import CpuMeter, Proc, Result, per_1000, percentiles
from bench.systems.celery_redis import (
    READ_BATCH,
    REPO,
    TASKS_MODULE,
    Servers,
    Variant,
    config_line,
    servers,
    wait_counted,
)
from bench.systems.celery_tasks import BEAT_JOBS_ENV, NOOP
from bench.workloads import Plan, arrivals, due_batches, held, minute_marks, notice_note

TICK = 0.02  # seconds between W3 submit rounds
SETTLE = 10.0  # seconds past the last due instant allowed for tasks to end


def _results(srv: Servers, ids: list[str]) -> list[object | None]:
    """Each task's result (None if it has none), in the order of ``ids``."""
    backend = srv.app.backend
    out: list[object | None] = []
    for i in range(0, len(ids), READ_BATCH):
        keys = [backend.get_key_for_task(t) for t in ids[i : i + READ_BATCH]]
        for raw in backend.client.mget(keys):
            meta = raw and backend.decode_result(raw)
            out.append(meta["result"] if meta and meta["status"] == "SUCCESS" else None)
    return out


def _w3_rate(variant: Variant, srv: Servers, rate: int, seconds: float) -> Result:
    schedule = arrivals(rate, seconds)
    task = srv.app.tasks[NOOP]
    meter = CpuMeter(
        {"broker": [srv.redis.pid], "workers": [srv.worker.pid], "client": [os.getpid()]}
    )
    meter.start()
    ids, etas = [], []
    start, sent = time.time(), 0
    with srv.app.producer_or_acquire() as producer:
        while sent < len(schedule):
            batch, sent = due_batches(schedule, time.time() - start, sent)
            for _, due in batch:
                eta = start + due
                etas.append(eta)
                ids.append(
                    task.apply_async(producer=producer, eta=datetime.fromtimestamp(eta, UTC)).id
                )
            time.sleep(TICK)
    last = time.time()
    deadline = time.monotonic() + max(0.0, start + seconds + 5.0 - time.time()) + SETTLE
    stopped = wait_counted(srv, len(ids), deadline)
    cpu = meter.stop()
    starts = _results(srv, ids)
    notices = [due - sent for sent, due in schedule[: len(ids)]]
    pairs = [  # (notice, start lag) of each task that started
        (n, s - eta)
        for n, s, eta in zip(notices, starts, etas, strict=True)
        if isinstance(s, float)
    ]
    lags = [lag for _, lag in pairs]
    return Result(
        system=variant.system,
        workload="W3",
        n=len(schedule),
        rate=float(rate),
        config=config_line(variant, srv, "W3"),
        config_id=variant.config_id,
        submit_rate=len(ids) / max(last - start, 1e-9),
        lag=percentiles(lags),
        cpu_per_1000=per_1000(cpu, len(schedule)),
        completed=len(lags),
        notes=f"lag = task start (its result) - eta; {notice_note(rate, pairs)}"
        + (f"; {stopped}" if stopped else ""),
    )


def w3(variant: Variant, plan: Plan, out_dir: Path, log_dir: Path) -> list[Result]:
    """Each rate in turn, up to the first one not held (a higher one would not be
    either, and its backlog would take minutes to drain)."""
    results = []
    for rate in plan.w3_rates:
        with servers(variant, out_dir, log_dir / f"rate{rate}") as srv:
            r = _w3_rate(variant, srv, rate, plan.w3_seconds)
        results.append(r)
        if not held(r.lag.get("p99"), r.completed, r.n):
            break
    return results


def _all_results(srv: Servers) -> list[list[float]]:
    client = srv.app.backend.client
    keys = list(client.scan_iter(match="celery-task-meta-*", count=1000))
    out = []
    for i in range(0, len(keys), READ_BATCH):
        for raw in client.mget(keys[i : i + READ_BATCH]):
            meta = raw and srv.app.backend.decode_result(raw)
            if meta and meta["status"] == "SUCCESS":
                out.append(meta["result"])
    return out


def w4(variant: Variant, srv: Servers, jobs: int, plan: Plan, log_dir: Path) -> Result:
    conf = srv.app.conf
    args = [sys.executable, "-m", "celery", "-A", TASKS_MODULE, "-b", conf.broker_url]
    args += ["--result-backend", conf.result_backend, "beat", "--loglevel", "WARNING"]
    args += ["-s", str(log_dir / "beat-schedule")]
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    beat = Proc(
        args, log_dir / "beat.log", env={"PYTHONPATH": pythonpath, BEAT_JOBS_ENV: str(jobs)}
    )
    try:
        beat.start()
        meter = CpuMeter(
            {
                "broker": [srv.redis.pid],
                "workers": [srv.worker.pid],
                "beat": [beat.pid],
                "client": [os.getpid()],
            }
        )
        meter.start()
        marks = minute_marks(time.time() + 5.0, plan.w4_minutes)  # beat's start-up first
        expected = jobs * len(marks)
        time.sleep(max(0.0, marks[0] - 1.0 - time.time()))
        before = int(srv.app.backend.client.dbsize())
        time.sleep(max(0.0, marks[-1] - time.time()))
        wait_counted(srv, before + expected, time.monotonic() + SETTLE)
        cpu = meter.stop()
    finally:
        beat.stop()
    fires: dict[tuple[int, float], list[float]] = {}
    for job, started in _all_results(srv):
        minute = float(int(started) // 60 * 60)
        if minute in marks:
            fires.setdefault((int(job), minute), []).append(started)
    errors = [abs(min(v) - minute) for (_, minute), v in fires.items()]
    return Result(
        system=variant.system,
        workload="W4",
        n=expected,
        config=config_line(variant, srv, "W4") + f"; {jobs:,} entries, {len(marks)} minutes",
        config_id=variant.config_id,
        lag=percentiles(errors),
        cpu_per_1000=per_1000(cpu, expected),
        completed=len(fires),
        missed=expected - len(fires),
        duplicates=sum(len(v) - 1 for v in fires.values()),
        notes="fire error = |task start - the minute|; CPU from beat's start",
    )

"""Celery + Redis, the usual Python peer: W1 (burst), W2 (due storm) and W6 (``true``
commands: each task runs it with ``subprocess.run``). ``celery_peer`` runs every
variant on every workload; W3 and W4 are in ``celery_timed``.

Every (variant, workload) run gets its own redis-server (a free port, no persistence,
a temporary directory under ``out_dir``) and its own ``celery worker``, both stopped
before the run's ``Result`` is returned, so no run inherits queued or held tasks from
another. Redis is the broker (db 0) and the result backend (db 1).

Variants, as docs/benchmarks.md configures this peer: one task per job on ``--pool prefork
--concurrency 2`` with ``acks_late=True``, once with ``worker_prefetch_multiplier=1``
and once with Celery's default (4); and, for W1 only, ``chunks(100)``, where a task
runs 100 jobs and only the chunk is tracked. Workers log at WARNING (INFO writes two
lines per task) and run without gossip, mingle and heartbeat, which only add broker
traffic on one worker.

Submitting uses Celery's ordinary client path, ``apply_async`` on one producer, so
each job is one message and one tracked result; with a Redis backend that path also
subscribes the client to the task's result channel. The client never reads those
notifications, so the server is told not to drop a client whose pub/sub output
backs up, which would otherwise make Celery resubscribe mid-run.

Completion is counted, not collected: the result db holds nothing but results, so
``DBSIZE`` on it is the number of finished tasks, one O(1) round trip per poll. Once
all are counted (or the run timed out), the results are read in bulk (``MGET``): a
job's result is its start time, and the backend's ``date_done`` its completion time,
so the figures do not depend on the poll interval.

CPU is metered for the broker (redis-server), the workers (the worker and its prefork
children) and the client (this process, which submits, counts and reads results), from
right before the first submit until the last completion is counted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import CpuMeter, Proc, Result, free_port, per_1000, percentiles, wait_port

if TYPE_CHECKING:
    from celery import Celery

REPO = Path(__file__).resolve().parents[2]
TASKS_MODULE = "bench.systems.celery_tasks"
BROKER_DB = 0
RESULT_DB = 1  # results only, so its DBSIZE counts finished tasks
CONCURRENCY = 2
TIMEOUT_S = 600.0  # per workload, submitting included
POLL_S = 0.02  # DBSIZE poll; only delays when the CPU span ends, not the figures
READ_BATCH = 1000  # keys per MGET when reading results
W2_LEAD_S = 5.0  # T = now + estimated submit time + this
W2_RATE_GUESS = 500.0  # submits/s assumed for W2 when W1 has not measured this variant
# Ports that other servers on this machine use: never picked.
RESERVED_PORTS = (
    range(7400, 7501),
    range(9042, 9043),
    range(2181, 2182),
    range(2191, 2192),
    range(9464, 9471),
)


@dataclass(frozen=True, slots=True)
class Variant:
    system: str  # Result.system
    slug: str  # names the run's log directory
    config_id: str  # Result.config_id, the JSON's "config"
    prefetch: int | None  # worker_prefetch_multiplier; None keeps Celery's default (4)
    chunk: int | None = None  # jobs per chunk task; None: one task per job
    workloads: tuple[str, ...] = ("W1", "W2", "W3", "W6")


VARIANTS = (
    Variant(
        "celery+redis, prefork x2, prefetch 1",
        "prefetch1",
        "celery-prefetch1",
        prefetch=1,
        workloads=("W1", "W2", "W3", "W4", "W6"),
    ),
    Variant(
        "celery+redis, prefork x2, default prefetch",
        "prefetch-default",
        "celery-default",
        prefetch=None,
    ),
    Variant(
        "celery+redis, chunks(100), prefork x2, prefetch 1",
        "chunks100",
        "celery-chunks100",
        prefetch=1,
        chunk=100,
        workloads=("W1",),
    ),
)
CONFIGS = {
    w: [v.config_id for v in VARIANTS if w in v.workloads] for w in ("W1", "W2", "W3", "W4", "W6")
}


@dataclass(slots=True)
class Servers:
    """What one run started, and the client app talking to it."""

    redis: Proc
    worker: Proc
    app: Celery
    redis_version: str


@dataclass(slots=True)
class Submitted:
    ids: list[str]  # one per tracked task (a chunk counts once)
    jobs: int  # jobs those tasks carry
    first: float  # time.time() right before the first submit
    last: float  # time.time() right after the last submit returned


@dataclass(slots=True)
class Outcome:
    starts: list[float]  # start time of every completed job
    last_end: float | None  # latest date_done among completed tasks
    stopped_early: str  # why waiting ended before all were counted ("" if it did not)


def missing_requirements() -> list[str]:
    """What this peer needs and cannot find, each with how to get it."""
    missing = []
    if shutil.which("redis-server") is None:
        missing.append("redis-server (Debian: apt-get install -y redis-server)")
    for module, pin in (("celery", "celery[redis]==5.7.0"), ("redis", "redis==8.1.0")):
        if importlib.util.find_spec(module) is None:
            missing.append(f"Python package {pin} (pip install '{pin}')")
    return missing


# --- servers -------------------------------------------------------------------------


def pick_port() -> int:
    while True:
        port = free_port()
        if not any(port in r for r in RESERVED_PORTS):
            return port


@contextlib.contextmanager
def servers(variant: Variant, out_dir: Path, log_dir: Path) -> Iterator[Servers]:
    """A fresh redis-server and celery worker for one run; both stopped on the way out."""
    from bench.systems.celery_tasks import make_app

    port = pick_port()
    broker_url = f"redis://127.0.0.1:{port}/{BROKER_DB}"
    backend_url = f"redis://127.0.0.1:{port}/{RESULT_DB}"
    procs: list[Proc] = []
    app: Celery | None = None
    with tempfile.TemporaryDirectory(dir=out_dir, prefix="redis-") as data_dir:
        try:
            conf = Path(data_dir) / "redis.conf"
            conf.write_text(
                f"port {port}\n"
                "bind 127.0.0.1\n"
                f"dir {data_dir}\n"
                'save ""\n'
                "appendonly no\n"
                # The client never reads its result notifications (see the module
                # docstring); dropping it for that would only make Celery resubscribe.
                "client-output-buffer-limit pubsub 0 0 0\n"
            )
            redis = Proc(["redis-server", str(conf)], log_dir / "redis.log").start()
            procs.append(redis)
            wait_port(port, timeout=30)

            worker_args = [sys.executable, "-m", "celery", "-A", TASKS_MODULE]
            worker_args += ["-b", broker_url, "--result-backend", backend_url, "worker"]
            worker_args += ["--pool", "prefork", "--concurrency", str(CONCURRENCY)]
            if variant.prefetch is not None:
                worker_args += ["--prefetch-multiplier", str(variant.prefetch)]
            worker_args += ["--loglevel", "WARNING", "-n", f"bench-{variant.slug}@%h"]
            worker_args += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
            pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
            worker = Proc(worker_args, log_dir / "worker.log", env={"PYTHONPATH": pythonpath})
            procs.append(worker.start())

            app = make_app(broker_url, backend_url)
            wait_worker_ready(app, worker, timeout=60)
            warm_up(app)
            yield Servers(redis, worker, app, redis_server_version())
        finally:
            if app is not None:
                close_app(app)
            for proc in reversed(procs):  # the worker first, while Redis still answers
                proc.stop()


def wait_worker_ready(app: Celery, worker: Proc, timeout: float) -> None:
    """Until the worker answers a ping, which it does once its pool and consumer run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not worker.alive():
            raise RuntimeError(f"celery worker exited during start-up; see {worker.log}")
        if app.control.ping(timeout=0.5):
            return
    raise TimeoutError(f"celery worker not ready after {timeout:.0f}s; see {worker.log}")


def warm_up(app: Celery) -> None:
    """One task through the whole path, so the first measured submit does not pay for
    the client's connections; its result is then dropped to keep the count exact."""
    from bench.systems.celery_tasks import NOOP

    app.tasks[NOOP].apply_async().get(timeout=30)
    app.backend.client.flushdb()


def close_app(app: Celery) -> None:
    with contextlib.suppress(Exception):
        app.backend.result_consumer.stop()
    with contextlib.suppress(Exception):
        app.backend.client.close()
    with contextlib.suppress(Exception):
        app.close()


def redis_server_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    found = re.search(r"v=(\S+)", out)
    return found.group(1) if found else "?"


# --- workloads -----------------------------------------------------------------------


def measure(
    variant: Variant, srv: Servers, n: int, eta: float | None, task: str = "bench.noop"
) -> tuple[Any, Any, Any]:
    """Submits ``n`` tasks and waits for them, CPU metered over exactly that span;
    returns (submission, outcome, CPU seconds by role)."""
    deadline = time.monotonic() + TIMEOUT_S
    meter = cpu_meter(srv)
    meter.start()
    sub = submit(srv.app, variant, n, eta=eta, deadline=deadline, task_name=task)
    stopped_early = wait_counted(srv, len(sub.ids), deadline)
    cpu = meter.stop()
    return sub, read_outcome(srv.app, sub.ids, variant, stopped_early), cpu


def run_w1(variant: Variant, srv: Servers, n: int, workload: str = "W1") -> Result:
    """W1 (no-op tasks) or W6 (each task runs the `true` command)."""
    from bench.systems.celery_tasks import NOOP, TRUE

    sub, out, cpu = measure(variant, srv, n, None, TRUE if workload == "W6" else NOOP)

    result = Result(
        system=variant.system,
        workload=workload,
        n=n,
        config=config_line(variant, srv, workload),
        completed=len(out.starts),
        cpu_per_1000=per_1000(cpu, n),
    )
    if sub.last > sub.first:
        result.submit_rate = sub.jobs / (sub.last - sub.first)
    if out.last_end is not None and out.last_end > sub.first:
        result.e2e_rate = len(out.starts) / (out.last_end - sub.first)
        result.drain_s = out.last_end - sub.last
    result.notes = notes(sub, n, out)
    return result


def run_w2(variant: Variant, srv: Servers, n: int, rate_hint: float | None) -> Result:
    # T must lie past the last submit: submits are assumed 1.5x slower than W1 measured
    # for this variant (or W2_RATE_GUESS per second), plus a lead.
    rate = rate_hint / 1.5 if rate_hint else W2_RATE_GUESS
    due = time.time() + n / rate + W2_LEAD_S
    sub, out, cpu = measure(variant, srv, n, due)

    result = Result(
        system=variant.system,
        workload="W2",
        n=n,
        config=config_line(variant, srv, "W2"),
        completed=len(out.starts),
        lag=percentiles([start - due for start in out.starts]),
        cpu_per_1000=per_1000(cpu, n),
    )
    if out.last_end is not None:
        result.drain_s = out.last_end - due
    timing = (
        f"submits took {sub.last - sub.first:.1f}s and ended {due - sub.last:.1f}s before T"
        if sub.last <= due
        else f"submits overran T by {sub.last - due:.1f}s, so lag includes that"
    )
    result.notes = f"{timing}; {notes(sub, n, out)}"
    return result


def cpu_meter(srv: Servers) -> CpuMeter:
    return CpuMeter(
        {"broker": [srv.redis.pid], "workers": [srv.worker.pid], "client": [os.getpid()]}
    )


def submit(
    app: Celery,
    variant: Variant,
    n: int,
    eta: float | None,
    deadline: float,
    task_name: str = "bench.noop",
) -> Submitted:
    """Submit ``n`` jobs, stopping early (with what was sent) if the deadline passes."""
    task = app.tasks[task_name]
    options: dict[str, Any] = {}
    if eta is not None:
        options["eta"] = datetime.fromtimestamp(eta, tz=UTC)

    if variant.chunk is not None:
        # One call publishes all n / chunk chunk tasks (a group of ``celery.starmap``).
        first = time.time()
        group_result = task.chunks([()] * n, variant.chunk).apply_async(**options)
        last = time.time()
        return Submitted([r.id for r in group_result.results], n, first, last)

    ids: list[str] = []
    first = time.time()
    with app.producer_or_acquire() as producer:
        for i in range(n):
            if i % 500 == 0 and time.monotonic() >= deadline:
                break
            ids.append(task.apply_async(producer=producer, **options).id)
    last = time.time()
    return Submitted(ids, len(ids), first, last)


def wait_counted(srv: Servers, tasks: int, deadline: float) -> str:
    """Until the result db holds ``tasks`` results; else why waiting stopped before."""
    client = srv.app.backend.client
    while client.dbsize() < tasks:
        if time.monotonic() >= deadline:
            return f"timed out after {TIMEOUT_S:.0f}s"
        if not srv.worker.alive():
            return f"celery worker exited (see {srv.worker.log})"
        time.sleep(POLL_S)
    return ""


def read_outcome(app: Celery, ids: list[str], variant: Variant, stopped_early: str) -> Outcome:
    """Start times of the completed jobs and the last completion, read in bulk."""
    backend = app.backend
    starts: list[float] = []
    last_end: float | None = None
    for i in range(0, len(ids), READ_BATCH):
        keys = [backend.get_key_for_task(task_id) for task_id in ids[i : i + READ_BATCH]]
        for raw in backend.client.mget(keys):
            if raw is None:
                continue
            meta = backend.decode_result(raw)
            if meta["status"] != "SUCCESS":
                continue
            # A chunk's result is the list of its jobs' results.
            starts.extend(meta["result"] if variant.chunk is not None else [meta["result"]])
            end = datetime.fromisoformat(meta["date_done"]).timestamp()
            last_end = end if last_end is None else max(last_end, end)
    return Outcome(starts, last_end, stopped_early)


def config_line(variant: Variant, srv: Servers, workload: str) -> str:
    import celery

    prefetch = variant.prefetch if variant.prefetch is not None else "default (4)"
    if variant.chunk is not None:
        jobs = f"chunks({variant.chunk}) submitted as one group of celery.starmap tasks"
    else:
        jobs = "one task per job, apply_async in a loop on one producer"
    if workload == "W2":
        jobs += ", eta=T"
    if workload == "W3":
        jobs += ", eta = submit + 0-5 s, submitted on a timetable"
    if workload == "W4":
        jobs = "celery beat (crontab(), one entry per job) sending bench.fire(i)"
    if workload == "W6":
        jobs += "; the task runs `true` with subprocess.run"
    return (
        f"celery {celery.__version__}, redis-server {srv.redis_version} (save '', appendonly no, "
        f"pubsub output buffer unlimited) as broker (db {BROKER_DB}) and result backend "
        f"(db {RESULT_DB}); worker --pool prefork --concurrency {CONCURRENCY}, "
        f"prefetch multiplier {prefetch}, acks_late=True, "
        f"loglevel WARNING, without gossip/mingle/heartbeat; json; {jobs}"
    )


def notes(sub: Submitted, n: int, out: Outcome) -> str:
    parts = []
    if sub.jobs < n:
        parts.append(f"timed out after {TIMEOUT_S:.0f}s while submitting: {sub.jobs} of {n} sent")
    if out.stopped_early:
        parts.append(f"{out.stopped_early}: {len(out.starts)} of {n} completed")
    parts.append(
        f"completion: DBSIZE of the result db polled every {POLL_S * 1000:.0f} ms; start times "
        "(task results) and completion times (date_done) read with MGET after the run"
    )
    return "; ".join(parts)


if __name__ == "__main__":
    from dataclasses import asdict

    from bench.systems.celery_peer import run

    for res in run(["W1", "W2"], {"W1": 2000, "W2": 2000}, Path("/tmp/bench-celery")):
        print(asdict(res))

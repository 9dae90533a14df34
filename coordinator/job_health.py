"""A page of jobs with their health: each job's last runs that came due, read with the
page (``ListJobsRequest.with_health``).

One bounded read per job listed (``JobStore.list_runs``, newest due first, a page of
``JOB_HEALTH_RUNS`` plus the runs not due yet that a recurring job keeps ahead), a few
jobs at a time: what a page costs follows its size, never the number of jobs or runs
stored. A job whose runs cannot be read is listed without its health rather than
failing the page.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime

from shardcron.client.dataclass_copies import copy_with
from shardcron.client.errors import ShardcronError
from shardcron.client.types import (
    JOB_HEALTH_RUNS,
    Job,
    JobHealth,
    JobHealthRun,
    Run,
    RunState,
)
from shardcron.coordinator.store import JobStore

log = logging.getLogger(__name__)

# Runs not due yet read past the strip's: a recurring job keeps its next fire's run
# (and a retry may wait beside it), newest due first, ahead of those that came due.
AHEAD = 4
READS_AT_ONCE = 16  # jobs of a page whose runs are read at once


def health_of(runs: Sequence[Run], now: datetime) -> JobHealth:
    """The strip of ``runs`` (newest due first): those that came due, at most
    ``JOB_HEALTH_RUNS``."""
    came_due = [r for r in runs if not (r.state is RunState.PENDING and r.due_at > now)]
    return JobHealth(
        runs=tuple(
            JobHealthRun(run_id=r.id, state=r.state, due_at=r.due_at)
            for r in came_due[:JOB_HEALTH_RUNS]
        )
    )


async def with_health(store: JobStore, owner: str, jobs: Sequence[Job], now: datetime) -> list[Job]:
    """``jobs`` each with its ``health``, in the same order."""
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def one(job: Job) -> Job:
        async with gate:
            try:
                page = await store.list_runs(owner, job.id, page_size=JOB_HEALTH_RUNS + AHEAD)
            except ShardcronError as e:
                log.warning("health of job %s not read: %s", job.id, e)
                return job
            except Exception:
                log.exception("health of job %s not read", job.id)
                return job
        return copy_with(job, health=health_of(page.items, now))

    return list(await asyncio.gather(*(one(j) for j in jobs)))

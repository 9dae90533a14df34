"""An owner's overview as the api answers it (``JobService.GetOverview``).

Every poller's part (``PollerLink.overview_parts``: kept in its memory, see
``poller/history.py``) merged (``client/overview.merge``); then its failing jobs, at
most ``FAILING_JOBS``, read again by id in one bounded read and shown as stored: a job
deleted since drops out, and so does one whose stored streak says it fails no more (a
later run succeeded on the poller its shard moved to, whose part the old poller's
entry outlives); a streak of FAILED or TIMED_OUT runs is the stored one. Nothing else
is read from the store: the cost follows the pollers and the runs they hold, never the
jobs or runs stored.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Protocol

from shardcron.client.overview import Overview, OverviewPart, OverviewWindow, merge, window_starts
from shardcron.client.types import JobState, RunState
from shardcron.coordinator.store import JobStore


class OverviewParts(Protocol):
    """What the overview needs of the api's ``PollerLink``: every poller's part."""

    async def overview_parts(self, owner: str, window: OverviewWindow) -> list[OverviewPart]: ...


_STREAK_STATES = (RunState.FAILED, RunState.TIMED_OUT)  # the runs a job's streak counts


async def read_overview(
    link: OverviewParts, store: JobStore, owner: str, window: OverviewWindow, now: datetime
) -> Overview:
    """``owner``'s overview over ``window``, its buckets ending with ``now``'s."""
    parts = await link.overview_parts(owner, window)
    merged = merge(parts, window, window_starts(window, now))
    ids = [j.job_id for j in merged.failing_jobs]
    jobs = await store.get_jobs(ids) if ids else {}
    failing = []
    for entry in merged.failing_jobs:
        job = jobs.get(entry.job_id)
        if job is None or job.owner != owner or job.state == JobState.DELETED:
            continue
        streak = entry.consecutive_failures
        if entry.state in _STREAK_STATES:
            if job.consecutive_failures == 0:
                continue
            streak = job.consecutive_failures
        failing.append(dataclasses.replace(entry, name=job.spec.name, consecutive_failures=streak))
    failing.sort(key=lambda j: (-j.consecutive_failures, j.name, j.job_id))
    return dataclasses.replace(merged, failing_jobs=tuple(failing))

"""What reaches the poller's loop through its inbox, one frozen class per kind.

Worker streams, the api's hints and cancels and coordination's assignments all
run on other tasks; they hand the loop one of these and never touch its state.
A future in an event is completed by the loop: ``CancelRun.done`` with the run
as it stands after the cancel, ``AssignmentChanged.applied`` once the turn that
applied it (and its commit) is over.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from shardcron.client.stream import Hello, WorkerEvent
from shardcron.client.types import Job, Run, RunReason
from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.poller.workers import WorkerLink


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConnected:
    """A worker opened a lease stream (answered through ``link``) and said Hello.

    ``principal`` is who the stream authenticated as ("" on a node without an auth
    file) and ``owners`` its pool: the owners whose runs it may take (None: all)."""

    link: WorkerLink
    hello: Hello
    address: str
    principal: str = ""
    owners: frozenset[str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerMessage:
    """A worker sent a message on its stream (after its Hello)."""

    link: WorkerLink
    event: WorkerEvent


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerClosed:
    """A worker's stream ended; its leases stay until they expire (it may come back)."""

    link: WorkerLink


@dataclass(frozen=True, slots=True, kw_only=True)
class RunsCreated:
    """Hint from the api: these PENDING runs (of these jobs) were just written."""

    runs: tuple[Run, ...]
    jobs: tuple[Job, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class JobChanged:
    """Hint from the api: the job as stored after a change of spec or state."""

    job: Job


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRun:
    run: Run
    reason: RunReason
    done: asyncio.Future[Run]


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelJob:
    """Cancel every run of the job held here (DeleteJob with cancel_running)."""

    job_id: str
    reason: RunReason


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentChanged:
    assignment: Assignment
    applied: asyncio.Future[None]


InboxEvent = (
    WorkerConnected
    | WorkerMessage
    | WorkerClosed
    | RunsCreated
    | JobChanged
    | CancelRun
    | CancelJob
    | AssignmentChanged
)

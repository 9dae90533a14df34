"""What one turn of the poller's loop writes, and what it sends once that is durable.

The deciders add to a ``Turn``; the loop writes it in ONE store commit (group
commit), and only then sends the leases, cancels, acks and answers it carries:
a lease is durable before its worker sees it, a result before its worker is told
it was accepted. A store that writes in steps may name runs durable before the
commit is over (``JobStore.commit``'s ``durable``): their leases go out then
(``leases_sent``). A caller waiting on the turn (``answers``) always hears back: if the
turn is not written, the loop fails what it left unanswered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardcron.client.dataclass_copies import copy_with
from shardcron.client.stream import ResultAck
from shardcron.client.types import Delivery, OutputChunk, Run
from shardcron.coordinator.poller.table import Slot
from shardcron.coordinator.poller.workers import WorkerLink
from shardcron.coordinator.store import JobProgress


@dataclass(slots=True)
class Turn:
    runs: dict[str, Run] = field(default_factory=dict)  # new or changed runs, whole
    due: list[Run] = field(default_factory=list)  # new PENDING runs to index
    progress: dict[str, JobProgress] = field(default_factory=dict)
    output: list[OutputChunk] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)  # notifications of its ends
    leases: list[Slot] = field(default_factory=list)  # leased: sent after the commit
    leases_sent: set[str] = field(default_factory=set)  # run ids of those sent before its end
    acks: list[tuple[WorkerLink, ResultAck]] = field(default_factory=list)  # sent after it
    after: list[Callable[[], object]] = field(default_factory=list)  # run after it
    answers: list[asyncio.Future[Any]] = field(default_factory=list)  # answered after it
    # assignments applied in the turn: done once its commit is over (or failed)
    applied: list[asyncio.Future[None]] = field(default_factory=list)

    def set_progress(self, job_id: str, **changes: Any) -> None:
        have = self.progress.get(job_id)
        made = JobProgress(job_id=job_id, **changes) if have is None else copy_with(have, **changes)
        self.progress[job_id] = made

    def empty(self) -> bool:
        """Nothing to write (what is only sent, such as renewals, goes out anyway)."""
        return not (self.runs or self.due or self.progress or self.output or self.deliveries)

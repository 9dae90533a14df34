"""The poller's book of each connected worker, and what the loop may send it.

``WorkerBook`` is pure: a worker's capacity (slots, its credits for this stream,
cpu, memory, labels, handlers, commands), its pool (the owners whose runs its
credential lets it take; None: every owner) and the runs it holds here. A run goes
only to a worker of its owner's pool whose unused capacity covers it (``fits``); the
capacity it holds is given back when the poller records the run's end (``release``).

``WorkerLink`` is the outgoing half of one lease stream. The stream's edge
implements it and batches what one turn sends into one message per kind; the
loop calls ``flush`` once the turn's commit is durable.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from shardcron.client.errors import ShardcronError
from shardcron.client.stream import (
    CancelOrder,
    Hello,
    LeaseGrant,
    Renewal,
    ResultAck,
    Welcome,
)
from shardcron.client.types import (
    ANY_OWNER,
    CommandTask,
    HandlerTask,
    JobSpec,
    Resources,
    WorkerInfo,
)


class WorkerLink(Protocol):
    """What the poller sends one worker, batched until ``flush``."""

    @property
    def closed(self) -> bool:
        """The stream ended: nothing sent reaches the worker any more."""
        ...

    @property
    def demand_standing(self) -> bool:
        """The worker holds a demand of ours other than 0."""
        ...

    def welcome(self, welcome: Welcome) -> None: ...

    def lease(self, grant: LeaseGrant) -> None: ...

    def cancel(self, order: CancelOrder) -> None: ...

    def renewals(self, renewals: Sequence[Renewal], lease_ttl: timedelta) -> None: ...

    def ack(self, ack: ResultAck) -> None: ...

    def demand(self, slots: int) -> None:
        """Slots of ready runs this worker could take beyond its credits."""
        ...

    def flush(self) -> None:
        """Sends what was batched: one message per kind."""
        ...

    def flush_leases(self) -> None:
        """Sends the leases batched so far alone; the rest waits for ``flush``."""
        ...

    def close(self) -> None: ...

    def fail(self, error: ShardcronError) -> None:
        """Ends the stream with the error's status (the worker may not be served)."""
        ...

    def drop_unsent_leases(self) -> None:
        """Leases batched or queued but not yet written to the stream are never sent
        (their shards may have moved: their runs are reloaded and waited out)."""
        ...

    def forget(self) -> None:
        """The poller reloads its shards: nothing it decided before may still go out."""
        ...


class WorkerBook:
    """One open lease stream, as the poller sees the worker behind it."""

    __slots__ = (
        "address",
        "connected_at",
        "cpu_millis",
        "handlers",
        "id",
        "instance_id",
        "labels",
        "leases",
        "limit",
        "link",
        "memory_mb",
        "owners",
        "principal",
        "runs_commands",
        "slots",
        "used",
        "used_cpu",
        "used_mem",
        "waits_for_due",
    )

    def __init__(
        self,
        hello: Hello,
        *,
        address: str,
        link: WorkerLink,
        connected_at: datetime,
        principal: str = "",
        owners: frozenset[str] | None = None,
    ) -> None:
        self.id = hello.worker_id
        self.principal = principal  # who the stream authenticated as ("": no auth file)
        self.owners = owners  # the owners whose runs it may take; None: every owner
        self.instance_id = hello.instance_id
        self.address = address
        self.link = link
        self.connected_at = connected_at
        self.slots = max(1, hello.slots)
        self.limit = self.slots  # the worker's credits for this stream
        if hello.credit_limit is not None:
            self.set_credits(hello.credit_limit)
        self.cpu_millis = hello.cpu_millis
        self.memory_mb = hello.memory_mb
        self.labels = dict(hello.labels)
        self.handlers = hello.handlers
        self.runs_commands = hello.runs_commands
        # it holds a lease until the run's due instant: it may get one ahead of it
        self.waits_for_due = hello.waits_for_due
        self.leases: dict[str, Resources] = {}  # run id -> what it holds
        self.used = 0
        self.used_cpu = 0
        self.used_mem = 0

    def same_process(self, other: WorkerBook) -> bool:
        """Both streams come from one worker process: same worker id and instance id
        (a worker that says no instance id is taken as one process, as it always was)."""
        return self.id == other.id and self.instance_id == other.instance_id

    def set_credits(self, limit: int) -> None:
        """How many slots this stream may fill (Credits), clamped to 0..slots."""
        self.limit = min(self.slots, max(0, limit))

    @property
    def free(self) -> int:
        return max(0, min(self.slots, self.limit) - self.used)

    @property
    def restricted(self) -> bool:
        """The worker shares its slots with other pollers: it wants our Demand."""
        return self.limit < self.slots

    def takes(self, owner: str) -> bool:
        """The worker's pool includes ``owner``: its runs may be leased to it."""
        return self.owners is None or owner in self.owners

    def fits(self, spec: JobSpec, owner: str) -> bool:
        """The worker has room for a run of this job (of ``owner``) now."""
        need = spec.resources
        if self.free < (need.slots or 1):
            return False
        if need.cpu_millis and self.used_cpu + need.cpu_millis > self.cpu_millis:
            return False
        if need.memory_mb and self.used_mem + need.memory_mb > self.memory_mb:
            return False
        return self.could_run(spec, owner)

    def could_run(self, spec: JobSpec, owner: str) -> bool:
        """The worker can run this kind of run (of ``owner``) at all, when it has room."""
        if not self.takes(owner):
            return False
        need = spec.resources
        if (need.slots or 1) > self.slots:
            return False
        if need.cpu_millis > self.cpu_millis or need.memory_mb > self.memory_mb:
            return False
        if any(self.labels.get(k) != v for k, v in need.labels.items()):
            return False
        task = spec.task
        if isinstance(task, CommandTask):
            return self.runs_commands
        return isinstance(task, HandlerTask) and task.name in self.handlers

    def hold(self, run_id: str, need: Resources) -> None:
        if run_id in self.leases:
            return
        self.leases[run_id] = need
        self.used += need.slots or 1
        self.used_cpu += need.cpu_millis
        self.used_mem += need.memory_mb

    def release(self, run_id: str) -> None:
        need = self.leases.pop(run_id, None)
        if need is not None:
            self.used -= need.slots or 1
            self.used_cpu -= need.cpu_millis
            self.used_mem -= need.memory_mb

    def clear(self) -> None:
        """Forgets every run held (the poller reloads its shards)."""
        self.leases.clear()
        self.used = self.used_cpu = self.used_mem = 0

    def info(self) -> WorkerInfo:
        return WorkerInfo(
            id=self.id,
            address=self.address,
            slots_total=self.slots,
            slots_used=self.used,
            labels=dict(self.labels),
            handlers=tuple(sorted(self.handlers)),
            connected_at=self.connected_at,
            owners=(ANY_OWNER,) if self.owners is None else tuple(sorted(self.owners)),
        )

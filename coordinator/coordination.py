"""The Coordination seam: leadership, epochs, membership and shard assignment.

A poller learns from its Coordination which shards it owns and under which epoch
(the leader's term: every fencing token a poller issues carries it, so a token
from an older term always loses). Workers learn from it where the pollers are.
``LocalCoordination`` serves one process (the ``shardcron dev`` default): it is
its own leader and owns every shard, and it bumps a persisted epoch at every
start so tokens issued before a restart are stale after it.
``shardcron.coordinator.zk.ZkCoordination`` serves a cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """What one poller may serve. ``active=False`` (connection suspended): keep
    the shards but lease nothing until a later assignment says active again.

    ``epoch`` is the leader's term that made the assignment. ``fencing_epoch``
    is what the poller's lease tokens carry (``fencing_epoch << 32 | sequence``):
    strictly greater than any fencing epoch any poller had before in this
    cluster, so a poller that takes a shard over always issues tokens greater
    than those of every earlier owner.
    """

    epoch: int
    fencing_epoch: int
    shards: frozenset[int]
    active: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterView:
    """The cluster as one node sees it now.

    ``shard_owners`` names, per shard, the poller that holds it (serving it or
    about to); a shard being handed over is absent until its new owner took it.
    """

    mode: str
    leader: str
    epoch: int
    members: list[str] = field(default_factory=list)
    shard_owners: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """A live poller or worker: its id, the gRPC address others reach it on,
    and what it advertised (capacity, labels: JSON values)."""

    id: str
    address: str
    info: Mapping[str, Any] = field(default_factory=dict)


# A listener may return an awaitable: a shard it lost is then released to another
# poller only once that awaitable is done (the poller finishes the store write it
# has in flight first), or after a session timeout at the latest.
AssignmentListener = Callable[[Assignment], Awaitable[None] | None]
PollersListener = Callable[[list[Member]], None]


class Coordination(Protocol):
    """Leadership, membership and shard assignment for one node.

    Listeners (``subscribe``, ``watch_pollers``) are called on the event loop
    that called ``start``, in order, never concurrently. Every method raises
    ``shardcron.client.errors.Unavailable`` when the coordination service
    cannot be reached in time.
    """

    async def start(self, *, poller_id: str | None, poller_address: str) -> None:
        """Joins the cluster (and, where there is an election, stands for leader).

        With a ``poller_id`` the node is a poller: listeners then get every new
        Assignment for it. Call it once, after ``subscribe``. Raises
        ``Unavailable``, or ``FailedPrecondition`` when the cluster is
        configured differently (another shard count).
        """
        ...

    async def stop(self) -> None:
        """Leaves: listeners get an empty, inactive Assignment first, then the
        shards are released, membership goes and leadership is given up, so
        other nodes take over without waiting for a session to expire. Never raises."""
        ...

    def subscribe(self, listener: AssignmentListener) -> None:
        """Adds a listener for this node's poller Assignments. A shard dropped from
        an Assignment is released to its next owner only after every listener
        returned (and what a listener returned, if awaitable, is done)."""
        ...

    def ownership_valid(self) -> bool:
        """Whether this node may still act on the shards it was given: false once it
        has not heard from the coordination service for too long (frozen, cut off)."""
        ...

    def session_generation(self) -> int:
        """Changes whenever this node's session is replaced by a new one (everything the
        old one held is gone): nothing decided under an earlier value may be acted on,
        even once ``ownership_valid`` is true again."""
        ...

    async def view(self) -> ClusterView:
        """Leader, epoch, members and shard owners as they stand now. Raises ``Unavailable``."""
        ...

    async def register_worker(
        self, worker_id: str, address: str, info: Mapping[str, Any] | None = None
    ) -> None:
        """Announces a worker of this process (capacity, labels in ``info``) until
        ``stop``; it is announced again by itself after a lost session. Call after
        ``start``. Raises ``Unavailable``."""
        ...

    async def workers(self) -> list[Member]:
        """The live workers, by id. Raises ``Unavailable``."""
        ...

    async def pollers(self) -> list[Member]:
        """The live pollers, by id: where workers connect. Raises ``Unavailable``."""
        ...

    def watch_pollers(self, listener: PollersListener) -> None:
        """Calls ``listener`` with the live pollers soon after ``start`` (or at once
        if started) and again after every change, until ``stop``."""
        ...


class LocalCoordination:
    """One process, one poller, every shard. The epoch survives restarts in ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike[str], *, shard_count: int, node_id: str) -> None:
        self._path = Path(data_dir) / "epoch.json"
        self._shard_count = shard_count
        self._node_id = node_id
        self._listeners: list[AssignmentListener] = []
        self._poller_listeners: list[PollersListener] = []
        self._workers: dict[str, Member] = {}
        self._epoch = 0
        self._poller_id: str | None = None
        self._poller_address = ""
        self._started = False

    async def start(self, *, poller_id: str | None, poller_address: str) -> None:
        previous = 0
        if self._path.exists():
            previous = int(json.loads(self._path.read_text())["epoch"])
        self._epoch = previous + 1
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"epoch": self._epoch}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._poller_id = poller_id
        self._poller_address = poller_address
        self._started = True
        if poller_id is not None:
            assignment = Assignment(
                epoch=self._epoch,
                fencing_epoch=self._epoch,
                shards=frozenset(range(self._shard_count)),
            )
            for listener in self._listeners:
                listener(assignment)
        self._notify_pollers()

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._poller_id is not None:
            for listener in self._listeners:
                listener(
                    Assignment(
                        epoch=self._epoch,
                        fencing_epoch=self._epoch,
                        shards=frozenset(),
                        active=False,
                    )
                )
        self._poller_id = None
        self._workers.clear()
        self._poller_listeners.clear()

    def subscribe(self, listener: AssignmentListener) -> None:
        self._listeners.append(listener)

    def ownership_valid(self) -> bool:
        return True

    def session_generation(self) -> int:
        return 0

    async def view(self) -> ClusterView:
        owner = self._poller_id or ""
        return ClusterView(
            mode="dev",
            leader=self._node_id,
            epoch=self._epoch,
            members=[self._node_id],
            shard_owners={s: owner for s in range(self._shard_count)} if owner else {},
        )

    async def register_worker(
        self, worker_id: str, address: str, info: Mapping[str, Any] | None = None
    ) -> None:
        self._workers[worker_id] = Member(id=worker_id, address=address, info=dict(info or {}))

    async def workers(self) -> list[Member]:
        return [self._workers[w] for w in sorted(self._workers)]

    async def pollers(self) -> list[Member]:
        if self._poller_id is None:
            return []
        return [Member(id=self._poller_id, address=self._poller_address)]

    def watch_pollers(self, listener: PollersListener) -> None:
        self._poller_listeners.append(listener)
        if self._started:
            pollers = (
                [Member(id=self._poller_id, address=self._poller_address)]
                if self._poller_id
                else []
            )
            asyncio.get_running_loop().call_soon(listener, pollers)

    def _notify_pollers(self) -> None:
        pollers = (
            [Member(id=self._poller_id, address=self._poller_address)] if self._poller_id else []
        )
        for listener in self._poller_listeners:
            listener(pollers)

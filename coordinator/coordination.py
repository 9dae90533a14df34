"""The Coordination seam: leadership, epochs, membership and shard assignment.

A poller learns from its Coordination which shards it owns and under which epoch
(the leader's term: every fencing token a poller issues carries it, so a token
from an older term always loses). ``LocalCoordination`` serves one process (the
``shardcron dev`` default): it is its own leader and owns every shard, and it
bumps a persisted epoch at every start so tokens issued before a restart are
stale after it. A ZooKeeper implementation serves a cluster.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """What one poller may serve. ``active=False`` (connection suspended): keep
    the shards but lease nothing until a later assignment says active again."""

    epoch: int
    shards: frozenset[int]
    active: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterView:
    mode: str
    leader: str
    epoch: int
    members: list[str] = field(default_factory=list)
    shard_owners: dict[int, str] = field(default_factory=dict)


AssignmentListener = Callable[[Assignment], None]


class Coordination(Protocol):
    """Leadership and shard assignment for one node.

    ``start`` joins (and, where there is an election, stands for leader);
    listeners get every new Assignment for this node's poller, in order, on the
    event loop. ``stop`` leaves: ephemeral membership goes, shards are released.
    Raises ``Unavailable`` when the coordination service cannot be reached.
    """

    async def start(self, *, poller_id: str | None, poller_address: str) -> None: ...

    async def stop(self) -> None: ...

    def subscribe(self, listener: AssignmentListener) -> None: ...

    async def view(self) -> ClusterView: ...


class LocalCoordination:
    """One process, one poller, every shard. The epoch survives restarts in ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike[str], *, shard_count: int, node_id: str) -> None:
        self._path = Path(data_dir) / "epoch.json"
        self._shard_count = shard_count
        self._node_id = node_id
        self._listeners: list[AssignmentListener] = []
        self._epoch = 0
        self._poller_id: str | None = None

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
        if poller_id is not None:
            assignment = Assignment(epoch=self._epoch, shards=frozenset(range(self._shard_count)))
            for listener in self._listeners:
                listener(assignment)

    async def stop(self) -> None:
        if self._poller_id is not None:
            for listener in self._listeners:
                listener(Assignment(epoch=self._epoch, shards=frozenset(), active=False))

    def subscribe(self, listener: AssignmentListener) -> None:
        self._listeners.append(listener)

    async def view(self) -> ClusterView:
        owner = self._poller_id or ""
        return ClusterView(
            mode="dev",
            leader=self._node_id,
            epoch=self._epoch,
            members=[self._node_id],
            shard_owners={s: owner for s in range(self._shard_count)} if owner else {},
        )

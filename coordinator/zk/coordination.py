"""``ZkCoordination``: the ``Coordination`` of one cluster node, on ZooKeeper.

It composes the parts of this package (see its docstring for the layout and the
threads): one ``Session``; the ``AssignmentFeed`` and ``PollersFeed`` that carry
what is learnt to the loop; ``Membership``; for a poller, ``ShardOwnership``; the
``Reconciler`` thread that drives both; and, for the coordinator role, the
``Leadership`` thread. The methods of the protocol run on the asyncio loop and
do their blocking ZooKeeper work in executor threads (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from shardcron.client.errors import Unavailable
from shardcron.coordinator.coordination import (
    AssignmentListener,
    ClusterView,
    Member,
    PollersListener,
)
from shardcron.coordinator.zk.delivery import AssignmentFeed, PollersFeed
from shardcron.coordinator.zk.layout import (
    Watch,
    ZkPaths,
    check_name,
    cluster_paths,
    ensure_layout,
    read_members,
    read_view,
)
from shardcron.coordinator.zk.leadership import Leadership
from shardcron.coordinator.zk.membership import Membership
from shardcron.coordinator.zk.ownership import ShardOwnership
from shardcron.coordinator.zk.reconciler import Reconciler, Wakeups
from shardcron.coordinator.zk.session import Session
from shardcron.coordinator.zk.views import WatchedReads

log = logging.getLogger("shardcron.coordination")

ROLES = frozenset({"coordinator", "poller"})

T = TypeVar("T")


class ZkCoordination:
    """The Coordination of one cluster node on ZooKeeper.

    ``roles``: ``"coordinator"`` stands for leader; ``"poller"`` joins as a poller
    (``start`` must then get a ``poller_id``). A node with neither (a worker
    process) only announces workers and watches pollers. ``shard_count`` is
    required for both roles and checked against the cluster's.
    """

    def __init__(
        self,
        hosts: str,
        *,
        cluster: str = "default",
        node_id: str,
        shard_count: int | None = None,
        session_timeout: float = 6.0,
        roles: Iterable[str] = ROLES,
    ) -> None:
        roles = frozenset(roles)
        if roles - ROLES:
            raise ValueError(f"unknown coordination roles: {', '.join(sorted(roles - ROLES))}")
        check_name("cluster", cluster)
        check_name("node id", node_id)
        if roles and (shard_count is None or shard_count < 1):
            raise ValueError(
                "shard_count must be a positive number for coordinator and poller roles"
            )
        self._node_id = node_id
        self._shard_count = shard_count
        self._roles = roles
        self._paths = cluster_paths(cluster)
        self._resync_interval = max(1.0, session_timeout / 3)
        self._session = Session(
            hosts, node_id=node_id, timeout=session_timeout, probe_path=self._paths.root
        )
        self._feed = AssignmentFeed(self._session)
        self._watched = WatchedReads()  # view() and pollers(), until a watch fires
        self._session.on_state(self._watched.changed)
        self._pollers_feed = PollersFeed(self._session.stopping)
        self._wakeups = Wakeups()
        # Made by start(), once the poller's identity is known.
        self._poller_id: str | None = None
        self._membership: Membership | None = None
        self._ownership: ShardOwnership | None = None
        self._reconciler: Reconciler | None = None
        self._leadership: Leadership | None = None
        self._stopped = False

    # --- the Coordination protocol ---------------------------------------------

    async def start(self, *, poller_id: str | None, poller_address: str) -> None:
        if self._reconciler is not None or self._stopped:
            raise RuntimeError("a ZkCoordination starts once")
        if ("poller" in self._roles) != (poller_id is not None):
            raise ValueError("start() gets a poller_id exactly when the node has the poller role")
        if poller_id is not None:
            check_name("poller id", poller_id)
        loop = asyncio.get_running_loop()
        self._feed.attach(loop)
        self._pollers_feed.attach(loop)
        self._build(poller_id, poller_address)
        await asyncio.to_thread(self._open)

    async def stop(self) -> None:
        if not self._session.opened or self._stopped:
            self._stopped = True
            return
        self._stopped = True
        await asyncio.to_thread(self._shutdown)

    def subscribe(self, listener: AssignmentListener) -> None:
        self._feed.subscribe(listener)

    def ownership_valid(self) -> bool:
        """True while a ZooKeeper round trip on this session came back within half a
        session timeout: a process that was frozen, or cut off, longer than that
        must not act on the shards it thinks it holds, because by the time the
        session expires another poller may own them."""
        return self._session.ownership_valid()

    def session_generation(self) -> int:
        return self._session.generation

    async def view(self) -> ClusterView:
        return await self._watched_read("view", read_view, self._paths)

    async def register_worker(
        self, worker_id: str, address: str, info: Mapping[str, Any] | None = None
    ) -> None:
        check_name("worker id", worker_id)
        membership = self._membership
        if membership is None:
            raise Unavailable(f"not connected to ZooKeeper at {self._session.hosts}")
        membership.add_worker(worker_id, address, info)
        await self._read(membership.announce_workers)

    async def workers(self) -> list[Member]:
        return await self._read(lambda: read_members(self._session.client, self._paths.workers))

    async def pollers(self) -> list[Member]:
        return await self._watched_read("pollers", _read_pollers, self._paths)

    def watch_pollers(self, listener: PollersListener) -> None:
        if not self._pollers_feed.watch(listener):
            self._wakeups.wake("watch_pollers")

    # --- introspection (tests, metrics) ----------------------------------------

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def client(self) -> KazooClient:
        """The kazoo client (tests expire its session through it)."""
        return self._session.client

    @property
    def term(self) -> int:
        """The epoch this node leads under; 0 when it does not lead."""
        return self._leadership.term if self._leadership is not None else 0

    @property
    def is_leader(self) -> bool:
        return self.term > 0

    # --- start and stop ----------------------------------------------------------

    def _build(self, poller_id: str | None, poller_address: str) -> None:
        session, paths = self._session, self._paths
        self._poller_id = poller_id
        self._membership = Membership(
            session,
            paths,
            poller_id=poller_id,
            poller_address=poller_address,
            pollers_feed=self._pollers_feed,
            watch=self._wakeups.on_watch,
        )
        if poller_id is not None:
            assert self._shard_count is not None
            self._ownership = ShardOwnership(
                session,
                paths,
                self._feed,
                poller_id=poller_id,
                shard_count=self._shard_count,
                watch=self._wakeups.on_watch,
            )
        self._reconciler = Reconciler(
            session,
            self._wakeups,
            self._membership,
            self._pollers_feed,
            ownership=self._ownership,
            poller_id=poller_id,
            resync_interval=self._resync_interval,
        )
        if "coordinator" in self._roles:
            assert self._shard_count is not None
            self._leadership = Leadership(
                session,
                paths,
                node_id=self._node_id,
                shard_count=self._shard_count,
                resync_interval=self._resync_interval,
            )

    def _open(self) -> None:
        """Connects, checks the layout and, for a poller, joins; then starts the
        threads. Runs in an executor thread."""
        session = self._session
        assert self._reconciler is not None
        session.open()
        try:
            session.retry(ensure_layout, session.client, self._paths, self._shard_count)
            if self._poller_id is not None:
                with session.lock:
                    generation = session.generation
                self._reconciler.join_poller(generation)
        except BaseException as e:
            session.discard()
            if isinstance(e, KazooException):
                raise Unavailable(f"ZooKeeper at {session.hosts}: {e!r}") from e
            raise
        self._reconciler.start()
        session.start_confirming()
        if self._leadership is not None:
            self._leadership.start()
        self._wakeups.wake("start")

    def _shutdown(self) -> None:
        """Lets go in order: the listeners first, then the shards, the member
        nodes and leadership, then the session. Runs in an executor thread."""
        session = self._session
        assert self._reconciler is not None and self._membership is not None
        session.stopping.set()
        self._wakeups.wake("stop")
        if self._poller_id is not None:
            # The poller lets go of every shard before any of them is released.
            done = self._feed.close()
            if done is not None:
                done.wait(session.timeout)
        connected = session.client.connected
        # Connected, the reconciler finishes its step at once; cut off, it may be
        # stuck in a request that only closing the client ends.
        ended = self._reconciler.wait_ended(session.timeout if connected else 0.2)
        if connected and ended:
            try:
                if self._ownership is not None:
                    self._ownership.release_all()
                self._membership.leave()
            except KazooException as e:
                log.warning("coordination: release on stop failed (%r); closing releases", e)
        # A leader publishes a last assignment without this node, then resigns.
        if self._leadership is not None:
            self._leadership.stop()
        session.close()  # closes the session: whatever is left of it goes now
        self._reconciler.wait_ended(1.0)
        if self._leadership is not None:
            self._leadership.join(1.0)
        log.info("coordination: %s left the cluster", self._node_id)

    async def _watched_read(
        self, name: str, read: Callable[[KazooClient, ZkPaths, Watch], T], paths: ZkPaths
    ) -> T:
        """What ``read`` last gave, if ZooKeeper told of no change since (``WatchedReads``),
        else read afresh, watched."""
        held = self._watched.held(name)
        if held is not None:
            return held
        return await self._read(
            lambda: self._watched.read(name, lambda w: read(self._session.client, paths, w))
        )

    async def _read(self, fn: Callable[[], T]) -> T:
        """Runs ``fn`` (idempotent) in an executor thread, retried; ``Unavailable``
        when not connected or not done within a session timeout."""
        session = self._session
        if not session.opened or not session.client.connected:
            raise Unavailable(f"not connected to ZooKeeper at {session.hosts}")
        try:
            return await asyncio.wait_for(asyncio.to_thread(session.retry, fn), session.timeout)
        except (TimeoutError, KazooException) as e:
            raise Unavailable(f"ZooKeeper at {session.hosts}: {e!r}") from e


def _read_pollers(zk: KazooClient, paths: ZkPaths, watch: Watch) -> list[Member]:
    return read_members(zk, paths.pollers, watch, data_watch=watch)

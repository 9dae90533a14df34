"""ZooKeeper coordination for a shardcron cluster (kazoo).

Layout under ``/shardcron/<cluster>`` (the root's data: ``{"shard_count": S}``,
so nodes configured with another S refuse to start):

- ``leader/``           kazoo ``Lock`` contenders; the lowest holds the term
- ``epoch``             ``{"epoch": n, ...}``: the term, bumped (version-checked) by each new leader
- ``fencing``           ``{"fencing_epoch": n, ...}``: bumped by every poller (re)join; lease
                        tokens carry it, so a later owner always out-tokens an earlier one
- ``members/pollers/<id>``, ``members/workers/<id>``  ephemeral, ``{"address": ..., ...info}``
- ``assignment``        ``{"epoch": term, "owners": {"<shard>": poller_id}}``, written only by the
                        leader in a transaction that checks the epoch node's version, so a
                        deposed leader's write fails
- ``owners/<shard>``    ephemeral, held by the poller serving the shard

Hand-over: a poller serves a shard only while the assignment gives it the shard
AND it holds ``owners/<shard>``; if another session holds that node it waits for
the node to go (released, or the session expired). A poller losing a shard first
tells its listeners and waits until they ran (and until what they returned, if
awaitable, is done; a session timeout at most), then deletes the node. The
leader recomputes the assignment (``balance_shards``) on every change of
``members/pollers``.

Threads: kazoo's own, a reconciler (joins, takes and releases shards, announces
workers, tracks pollers) and an elector (leader election and the leader's
term). Connection states go straight to the listeners from kazoo's state
callback: SUSPENDED -> the same shards, inactive; LOST -> no shards at once, then
the reconciler rejoins (new ephemerals, new fencing epoch). Listeners always
run on the asyncio loop that called ``start``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.exceptions import CancelledError as LockCancelled
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent
from kazoo.recipe.lock import Lock
from kazoo.retry import ForceRetryError, KazooRetry

from shardcron.client.errors import FailedPrecondition, Unavailable
from shardcron.coordinator.coordination import (
    Assignment,
    AssignmentListener,
    ClusterView,
    Member,
    PollersListener,
)

log = logging.getLogger("shardcron.coordination")

ROLES = frozenset({"coordinator", "poller"})

T = TypeVar("T")


def balance_shards(
    current: Mapping[int, str], pollers: Iterable[str], shard_count: int
) -> dict[int, str]:
    """The shard -> poller map for ``pollers``: counts differ by at most one, and
    as few shards as possible change owner compared with ``current``.

    Each poller keeps up to its quota of the shards it has; the larger quotas
    go to the pollers that have most, so the fewest shards are taken away; the
    shards left over (owner gone or over quota) fill the pollers under quota.
    """
    members = sorted(set(pollers))
    if not members:
        return {}
    base, extra = divmod(shard_count, len(members))
    had = {
        p: sorted(s for s, o in current.items() if o == p and 0 <= s < shard_count) for p in members
    }
    by_size = sorted(members, key=lambda p: (-len(had[p]), p))
    quota = {p: base + (1 if i < extra else 0) for i, p in enumerate(by_size)}
    owners: dict[int, str] = {}
    for p in members:
        for s in had[p][: quota[p]]:
            owners[s] = p
    free = iter(s for s in range(shard_count) if s not in owners)
    for p in members:
        for _ in range(quota[p] - len(had[p][: quota[p]])):
            owners[next(free)] = p
    return dict(sorted(owners.items()))


@dataclass(frozen=True, slots=True)
class ZkPaths:
    """Where everything lives for one cluster."""

    root: str

    @property
    def leader(self) -> str:
        return f"{self.root}/leader"

    @property
    def epoch(self) -> str:
        return f"{self.root}/epoch"

    @property
    def fencing(self) -> str:
        return f"{self.root}/fencing"

    @property
    def pollers(self) -> str:
        return f"{self.root}/members/pollers"

    @property
    def workers(self) -> str:
        return f"{self.root}/members/workers"

    @property
    def assignment(self) -> str:
        return f"{self.root}/assignment"

    @property
    def owners(self) -> str:
        return f"{self.root}/owners"

    def owner(self, shard: int) -> str:
        return f"{self.root}/owners/{shard}"


class _Deposed(Exception):
    """The epoch moved past this leader's term: someone else leads now."""


class _SessionChanged(Exception):
    """The session this work started in is gone; start over in the new one."""


def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _load(data: bytes | None) -> dict[str, Any]:
    if not data:
        return {}
    value = json.loads(data)
    return value if isinstance(value, dict) else {}


def _check_name(what: str, name: str) -> None:
    if not name or "/" in name or name in (".", "..") or name != name.strip():
        raise ValueError(f"{what} {name!r} cannot be a ZooKeeper node name")


class ZkCoordination:
    """The Coordination of one cluster node on ZooKeeper (see the module docstring).

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
        _check_name("cluster", cluster)
        _check_name("node id", node_id)
        if roles and (shard_count is None or shard_count < 1):
            raise ValueError(
                "shard_count must be a positive number for coordinator and poller roles"
            )
        self._hosts = hosts
        self._node_id = node_id
        self._shard_count = shard_count
        self._session_timeout = session_timeout
        self._roles = roles
        self._paths = ZkPaths(f"/shardcron/{cluster}")
        self._resync_interval = max(1.0, session_timeout / 3)

        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller_id: str | None = None
        self._poller_address = ""
        self._listeners: list[AssignmentListener] = []
        self._poller_listeners: list[PollersListener] = []
        self._workers: dict[str, Member] = {}

        # Guarded by _lock: written by kazoo's state callback and the reconciler.
        self._lock = threading.Lock()
        self._connected = False
        self._gen = 0  # bumped at every LOST session
        self._need_join = True
        self._delivered: Assignment | None = None
        self._listeners_closed = False
        self._workers_announced: set[str] = set()

        # Reconciler thread only.
        self._member_ok = False
        self._fencing_epoch = 0
        self._max_epoch = 0
        self._held: set[int] = set()
        self._last_pollers: list[Member] | None = None

        # Elector thread only (plus cancel from stop).
        self._election_lock: Lock | None = None
        self.term = 0  # the epoch this node leads under; 0 when it does not lead

        self._wakeups: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._leader_wake = threading.Event()
        self._stopping = threading.Event()
        self._leader_stop = threading.Event()
        self._reconciler = threading.Thread()
        self._elector: threading.Thread | None = None
        self._stopped = False
        # monotonic time a ZooKeeper round trip, sent then, last came back on our session
        self._confirmed_at = -math.inf

    # --- the Coordination protocol ---------------------------------------------

    async def start(self, *, poller_id: str | None, poller_address: str) -> None:
        if self._client is not None or self._stopped:
            raise RuntimeError("a ZkCoordination starts once")
        if ("poller" in self._roles) != (poller_id is not None):
            raise ValueError("start() gets a poller_id exactly when the node has the poller role")
        if poller_id is not None:
            _check_name("poller id", poller_id)
        self._loop = asyncio.get_running_loop()
        self._poller_id = poller_id
        self._poller_address = poller_address
        await asyncio.to_thread(self._open)

    async def stop(self) -> None:
        if self._client is None or self._stopped:
            self._stopped = True
            return
        self._stopped = True
        await asyncio.to_thread(self._shutdown)

    def subscribe(self, listener: AssignmentListener) -> None:
        self._listeners.append(listener)

    async def view(self) -> ClusterView:
        return await self._read(self._read_view)

    async def register_worker(
        self, worker_id: str, address: str, info: Mapping[str, Any] | None = None
    ) -> None:
        _check_name("worker id", worker_id)
        self._workers[worker_id] = Member(id=worker_id, address=address, info=dict(info or {}))
        await self._read(self._announce_workers)

    async def workers(self) -> list[Member]:
        return await self._read(self._read_members, self._paths.workers)

    async def pollers(self) -> list[Member]:
        return await self._read(self._read_members, self._paths.pollers)

    def watch_pollers(self, listener: PollersListener) -> None:
        self._poller_listeners.append(listener)
        if self._last_pollers is not None:
            asyncio.get_running_loop().call_soon(listener, list(self._last_pollers))
        else:
            self._wake("watch_pollers")

    # --- introspection (tests, metrics) ----------------------------------------

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def client(self) -> KazooClient:
        """The kazoo client (tests expire its session through it)."""
        if self._client is None:
            raise RuntimeError("not started")
        return self._client

    @property
    def is_leader(self) -> bool:
        return self.term > 0

    # --- start and stop ----------------------------------------------------------

    def _open(self) -> None:
        client = KazooClient(
            hosts=self._hosts,
            timeout=self._session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
        )
        client.add_listener(self._on_state)
        try:
            client.start(timeout=self._session_timeout)
        except KazooTimeoutError as e:
            raise Unavailable(f"cannot reach ZooKeeper at {self._hosts}") from e
        self._client = client
        try:
            self._retry(self._ensure_layout)
            if self._poller_id is not None:
                with self._lock:
                    gen = self._gen
                self._join(gen)
        except BaseException as e:
            client.stop()
            client.close()
            self._client = None
            if isinstance(e, KazooException):
                raise Unavailable(f"ZooKeeper at {self._hosts}: {e!r}") from e
            raise
        self._reconciler = threading.Thread(
            target=self._run_reconciler, name=f"zk-reconcile-{self._node_id}", daemon=True
        )
        self._reconciler.start()
        threading.Thread(
            target=self._run_confirmer, name=f"zk-confirm-{self._node_id}", daemon=True
        ).start()
        if "coordinator" in self._roles:
            self._elector = threading.Thread(
                target=self._run_elector, name=f"zk-elect-{self._node_id}", daemon=True
            )
            self._elector.start()
        self._wake("start")

    def _shutdown(self) -> None:
        assert self._client is not None
        self._stopping.set()
        self._wake("stop")
        if self._poller_id is not None:
            # The poller lets go of every shard before any of them is released.
            with self._lock:
                done = self._deliver_locked(
                    Assignment(
                        epoch=self._max_epoch,
                        fencing_epoch=self._fencing_epoch,
                        shards=frozenset(),
                        active=False,
                    ),
                    gen=None,
                )
                self._listeners_closed = True
            if done is not None:
                done.wait(self._session_timeout)
        connected = self._client.connected
        # Connected, the reconciler finishes its step at once; cut off, it may be
        # stuck in a request that only closing the client ends.
        self._reconciler.join(self._session_timeout if connected else 0.2)
        if connected and not self._reconciler.is_alive():
            try:
                self._release_shards(sorted(self._held), interruptible=False)
                if self._poller_id is not None:
                    path = f"{self._paths.pollers}/{self._poller_id}"
                    self._retry(self._delete_own, path, interruptible=False)
                for worker_id in self._workers:
                    path = f"{self._paths.workers}/{worker_id}"
                    self._retry(self._delete_own, path, interruptible=False)
            except KazooException as e:
                log.warning("coordination: release on stop failed (%r); closing releases", e)
        # A leader publishes a last assignment without this node, then resigns.
        self._leader_stop.set()
        self._leader_wake.set()
        with self._lock:
            election_lock = self._election_lock
        if election_lock is not None:
            election_lock.cancel()
        if self._elector is not None:
            self._elector.join(self._session_timeout if self._client.connected else 0.2)
        self._client.stop()  # closes the session: whatever is left of it goes now
        self._client.close()
        self._reconciler.join(1.0)
        if self._elector is not None:
            self._elector.join(1.0)
        log.info("coordination: %s left the cluster", self._node_id)

    # --- connection states -------------------------------------------------------

    def _on_state(self, state: str) -> None:
        """kazoo's state callback (its connection thread): must not block."""
        with self._lock:
            if state == KazooState.CONNECTED:
                self._connected = True
            elif state == KazooState.SUSPENDED:
                # Do not trust what we hold until the session is known to be alive.
                self._connected = False
                if self._delivered is not None and self._delivered.active:
                    self._deliver_locked(
                        dataclasses.replace(self._delivered, active=False), gen=None
                    )
            else:  # LOST: every ephemeral of the old session is gone
                self._connected = False
                self._confirmed_at = -math.inf  # a new session confirms nothing held before
                self._gen += 1
                self._need_join = True
                self._workers_announced.clear()
                if not self._stopping.is_set() and self._delivered is not None:
                    self._deliver_locked(
                        Assignment(
                            epoch=self._max_epoch,
                            fencing_epoch=self._fencing_epoch,
                            shards=frozenset(),
                            active=False,
                        ),
                        gen=None,
                    )
        if not self._stopping.is_set():
            log.info("coordination: %s session %s", self._node_id, str(state).lower())
        self._wake(f"state {state}")
        self._leader_wake.set()

    # --- delivery to the loop -------------------------------------------------

    def _deliver(self, assignment: Assignment, gen: int) -> threading.Event:
        with self._lock:
            done = self._deliver_locked(assignment, gen=gen)
        if done is None:
            raise _SessionChanged()
        return done

    def _deliver_locked(self, assignment: Assignment, *, gen: int | None) -> threading.Event | None:
        """Queues ``assignment`` for the listeners unless it is stale (``gen`` is
        not the current session's) or the same as the last one. Returns an event
        set once the listeners ran; None if the assignment was dropped as stale."""
        if self._listeners_closed or (gen is not None and gen != self._gen):
            return None
        if assignment.active and not self._connected:
            assignment = dataclasses.replace(assignment, active=False)
        done = threading.Event()
        if assignment == self._delivered:
            done.set()
            return done
        self._delivered = assignment
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._call_listeners, assignment, done)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            done.set()
        return done

    def _call_listeners(self, assignment: Assignment, done: threading.Event) -> None:
        """Runs on the loop; ``done`` is set once every listener (and every
        awaitable a listener returned) finished."""
        pending: list[asyncio.Future[Any]] = []
        for listener in self._listeners:
            try:
                result = listener(assignment)
                if inspect.isawaitable(result):
                    pending.append(asyncio.ensure_future(result))
            except Exception:
                log.exception("coordination: assignment listener failed")
        if not pending:
            done.set()
            return
        asyncio.gather(*pending, return_exceptions=True).add_done_callback(lambda _: done.set())

    def _call_poller_listeners(self, pollers: list[Member]) -> None:
        if self._stopping.is_set():
            return
        for listener in self._poller_listeners:
            try:
                listener(list(pollers))
            except Exception:
                log.exception("coordination: pollers listener failed")

    # --- ZooKeeper helpers -----------------------------------------------------

    def _retry(
        self, fn: Callable[..., T], *args: Any, interruptible: bool = True, **kwargs: Any
    ) -> T:
        """Calls ``fn`` (idempotent by construction) until it gets through, for at
        most one session timeout. A session expiry is not retried: the work
        belongs to the session that started it."""
        retry = KazooRetry(
            max_tries=-1,
            delay=0.05,
            backoff=2,
            max_delay=0.5,
            deadline=self._session_timeout,
            ignore_expire=False,
            interrupt=self._stopping.is_set if interruptible else None,
        )
        return retry(fn, *args, **kwargs)

    def _session_id(self) -> int:
        assert self._client is not None
        client_id = self._client.client_id
        return client_id[0] if client_id else 0

    def _wake(self, why: str) -> None:
        self._wakeups.put(why)

    def _on_watch(self, event: WatchedEvent) -> None:
        self._wake(f"watch {event.type} {event.path}")

    def _on_leader_watch(self, event: WatchedEvent) -> None:
        self._leader_wake.set()

    def _ensure_layout(self) -> None:
        assert self._client is not None
        zk = self._client
        root = self._paths.root
        wanted = {"shard_count": self._shard_count} if self._shard_count is not None else {}
        try:
            zk.create(root, _dump(wanted), makepath=True)
        except NodeExistsError:
            data, stat = zk.get(root)
            config = _load(data)
            if self._shard_count is not None:
                if "shard_count" not in config:
                    try:
                        zk.set(root, _dump({**config, **wanted}), version=stat.version)
                    except BadVersionError:
                        raise ForceRetryError() from None
                elif int(config["shard_count"]) != self._shard_count:
                    raise FailedPrecondition(
                        f"cluster {root} has {config['shard_count']} shards, "
                        f"this node is configured with {self._shard_count}"
                    ) from None
        for path, initial in (
            (self._paths.leader, b""),
            (self._paths.epoch, _dump({"epoch": 0})),
            (self._paths.fencing, _dump({"fencing_epoch": 0})),
            (self._paths.pollers, b""),
            (self._paths.workers, b""),
            (self._paths.assignment, _dump({"epoch": 0, "owners": {}})),
            (self._paths.owners, b""),
        ):
            try:
                zk.create(path, initial, makepath=True)
            except NodeExistsError:
                pass

    def _bump(self, path: str, key: str) -> tuple[int, int]:
        """Adds one to the counter ``key`` in ``path`` (version-checked); returns
        the new value and the node's version. Idempotent under retry: the write
        carries a token, so a retry that finds its own write does not add again."""
        assert self._client is not None
        zk = self._client
        token = uuid.uuid4().hex

        def attempt() -> tuple[int, int]:
            data, stat = zk.get(path)
            current = _load(data)
            if current.get("token") == token:
                return int(current[key]), stat.version
            value = int(current.get(key, 0)) + 1
            try:
                written = zk.set(
                    path,
                    _dump({key: value, "by": self._node_id, "token": token}),
                    version=stat.version,
                )
            except BadVersionError:
                raise ForceRetryError() from None
            return value, written.version

        return self._retry(attempt)

    def _create_ephemeral(self, path: str, data: bytes) -> bool:
        """Creates ``path`` for this session; False (and a watch that wakes the
        reconciler) when another session holds it. Idempotent under retry."""
        assert self._client is not None
        zk = self._client

        def attempt() -> bool:
            try:
                zk.create(path, data, ephemeral=True)
                return True
            except NodeExistsError:
                stat = zk.exists(path, watch=self._on_watch)
                if stat is None:
                    raise ForceRetryError() from None
                return stat.ephemeralOwner == self._session_id()

        return self._retry(attempt)

    def _delete_own(self, path: str) -> None:
        """Deletes ``path`` if this session holds it (idempotent)."""
        assert self._client is not None
        stat = self._client.exists(path)
        if stat is None or stat.ephemeralOwner != self._session_id():
            return
        try:
            self._client.delete(path, version=stat.version)
        except NoNodeError:
            pass

    def _read_members(
        self, path: str, watch: Callable[[WatchedEvent], None] | None = None
    ) -> list[Member]:
        assert self._client is not None
        members = []
        for child in sorted(self._client.get_children(path, watch=watch)):
            try:
                data, _ = self._client.get(f"{path}/{child}")
            except NoNodeError:
                continue
            info = _load(data)
            address = str(info.pop("address", ""))
            members.append(Member(id=child, address=address, info=info))
        return members

    def _read_assignment(
        self, watch: Callable[[WatchedEvent], None] | None = None
    ) -> tuple[int, dict[int, str], int]:
        assert self._client is not None
        data, stat = self._client.get(self._paths.assignment, watch=watch)
        value = _load(data)
        owners = {int(s): str(p) for s, p in value.get("owners", {}).items()}
        return int(value.get("epoch", 0)), owners, stat.version

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        client = self._client
        if client is None or not client.connected:
            raise Unavailable(f"not connected to ZooKeeper at {self._hosts}")
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self._retry, fn, *args), self._session_timeout
            )
        except (TimeoutError, KazooException) as e:
            raise Unavailable(f"ZooKeeper at {self._hosts}: {e!r}") from e

    def _read_view(self) -> ClusterView:
        assert self._client is not None
        zk = self._client
        contenders = zk.Lock(self._paths.leader).contenders()
        epoch = int(_load(zk.get(self._paths.epoch)[0]).get("epoch", 0))
        pollers = zk.get_children(self._paths.pollers)
        owners: dict[int, str] = {}
        for child in zk.get_children(self._paths.owners):
            try:
                data, _ = zk.get(f"{self._paths.owners}/{child}")
            except NoNodeError:
                continue
            owners[int(child)] = str(_load(data).get("poller", ""))
        return ClusterView(
            mode="zookeeper",
            leader=contenders[0] if contenders else "",
            epoch=epoch,
            members=sorted(set(pollers) | set(contenders)),
            shard_owners=dict(sorted(owners.items())),
        )

    # --- ownership confirmation --------------------------------------------------

    def ownership_valid(self) -> bool:
        """True while a ZooKeeper round trip on this session came back within half a
        session timeout: a process that was frozen, or cut off, longer than that
        must not act on the shards it thinks it holds, because by the time the
        session expires another poller may own them."""
        return time.monotonic() < self._confirmed_at + self._session_timeout / 2

    def session_generation(self) -> int:
        return self._gen

    def _run_confirmer(self) -> None:
        interval = self._session_timeout / 6
        while True:
            client = self._client
            if client is not None and self._connected:
                sent = time.monotonic()
                session = self._session_id()
                try:
                    client.exists(self._paths.root)
                    if self._connected and self._session_id() == session:
                        self._confirmed_at = sent
                except Exception as e:
                    log.debug("coordination: %s confirm failed: %r", self._node_id, e)
            if self._stopping.wait(interval):
                return

    # --- the reconciler: membership and shards --------------------------------

    def _run_reconciler(self) -> None:
        while not self._stopping.is_set():
            try:
                self._wakeups.get(timeout=self._resync_interval)
            except queue.Empty:
                pass
            while True:
                try:
                    self._wakeups.get_nowait()
                except queue.Empty:
                    break
            if self._stopping.is_set():
                break
            try:
                self._reconcile()
            except InterruptedError:
                break
            except _SessionChanged:
                self._wake("session changed")
            except KazooException as e:
                if not self._stopping.is_set():
                    log.info("coordination: %s reconcile: %r; again shortly", self._node_id, e)
                    self._stopping.wait(0.2)
                    self._wake("retry")
            except Exception:
                log.exception("coordination: %s reconcile failed; again shortly", self._node_id)
                self._stopping.wait(1.0)
                self._wake("retry")

    def _reconcile(self) -> None:
        with self._lock:
            gen, need_join, connected = self._gen, self._need_join, self._connected
        if not connected:
            return  # a state change wakes us
        if need_join and self._poller_id is not None:
            self._join(gen)
        elif need_join:
            with self._lock:
                if self._gen == gen:
                    self._need_join = False
        self._announce_workers()
        if self._poller_id is not None:
            self._reconcile_shards(gen)
        if self._poller_listeners:
            self._track_pollers()

    def _join(self, gen: int) -> None:
        """Joins as a poller in the current session: a new fencing epoch, then the
        membership node (other nodes learn of this poller only once its tokens
        are sure to beat every earlier poller's)."""
        assert self._poller_id is not None
        fencing_epoch, _ = self._bump(self._paths.fencing, "fencing_epoch")
        with self._lock:
            if self._gen != gen:
                raise _SessionChanged()
            self._fencing_epoch = fencing_epoch
            self._held.clear()
            self._need_join = False
        self._member_ok = self._announce_poller()
        log.info(
            "coordination: poller %s joined (fencing epoch %d)", self._poller_id, fencing_epoch
        )

    def _announce_poller(self) -> bool:
        assert self._poller_id is not None
        path = f"{self._paths.pollers}/{self._poller_id}"
        data = _dump({"address": self._poller_address})
        if self._create_ephemeral(path, data):
            return True
        log.warning(
            "coordination: %s is held by another session (an earlier run of this poller?); "
            "waiting for it to go",
            path,
        )
        return False

    def _announce_workers(self) -> None:
        for worker_id, member in list(self._workers.items()):
            with self._lock:
                if worker_id in self._workers_announced:
                    continue
            path = f"{self._paths.workers}/{worker_id}"
            if self._create_ephemeral(path, _dump({**member.info, "address": member.address})):
                with self._lock:
                    self._workers_announced.add(worker_id)
            else:
                log.warning(
                    "coordination: %s is held by another session; waiting for it to go", path
                )

    def _reconcile_shards(self, gen: int) -> None:
        assert self._client is not None and self._poller_id is not None
        if not self._member_ok:
            self._member_ok = self._announce_poller()
            if not self._member_ok:
                return
        epoch, owners, _ = self._read_assignment(watch=self._on_watch)
        if epoch < self._max_epoch:
            log.warning(
                "coordination: ignoring an assignment of epoch %d < %d", epoch, self._max_epoch
            )
            return
        self._max_epoch = epoch
        if epoch == 0:
            return  # no leader has assigned anything yet
        mine = {
            s
            for s, p in owners.items()
            if p == self._poller_id and 0 <= s < (self._shard_count or 0)
        }
        fencing_epoch = self._fencing_epoch
        lost = self._held - mine
        if lost:
            kept = frozenset(self._held - lost)
            done = self._deliver(
                Assignment(epoch=epoch, fencing_epoch=fencing_epoch, shards=kept), gen
            )
            if not done.wait(self._session_timeout):
                log.warning("coordination: the poller did not take its new assignment in time")
            self._release_shards(sorted(lost))
            self._held -= lost
            log.info("coordination: %s released shards %s", self._poller_id, sorted(lost))
        wanted = sorted(mine - self._held)
        if wanted:
            taken = self._take_shards(wanted, fencing_epoch, gen)
            self._held.update(taken)
            if taken:
                log.info("coordination: %s took shards %s", self._poller_id, taken)
        self._deliver(
            Assignment(epoch=epoch, fencing_epoch=fencing_epoch, shards=frozenset(self._held)), gen
        )

    def _take_shards(self, shards: list[int], fencing_epoch: int, gen: int) -> list[int]:
        """Creates ``owners/<shard>`` for each shard (pipelined); returns those this
        session holds. A shard another session holds gets a watch that wakes the
        reconciler when it goes. Idempotent under retry: a retried create that
        finds its own node counts it as taken."""
        assert self._client is not None
        zk = self._client
        data = _dump({"poller": self._poller_id, "fencing_epoch": fencing_epoch})
        taken: set[int] = set()

        def attempt() -> None:
            with self._lock:
                if self._gen != gen:
                    raise _SessionChanged()
            session = self._session_id()
            pending = [
                (s, zk.create_async(self._paths.owner(s), data, ephemeral=True))
                for s in shards
                if s not in taken
            ]
            vanished = False
            for shard, result in pending:
                try:
                    result.get()
                    taken.add(shard)
                except NodeExistsError:
                    stat = zk.exists(self._paths.owner(shard), watch=self._on_watch)
                    if stat is None:
                        vanished = True  # released in between: try again now
                    elif stat.ephemeralOwner == session:
                        taken.add(shard)
            if vanished:
                raise ForceRetryError()

        self._retry(attempt)
        return sorted(taken)

    def _release_shards(self, shards: list[int], *, interruptible: bool = True) -> None:
        """Deletes the ``owners/<shard>`` nodes this session holds (pipelined, idempotent)."""
        assert self._client is not None
        zk = self._client

        def attempt() -> None:
            session = self._session_id()
            found = [(s, zk.exists_async(self._paths.owner(s))) for s in shards]
            deletes = []
            for shard, result in found:
                stat = result.get()
                if stat is not None and stat.ephemeralOwner == session:
                    deletes.append(zk.delete_async(self._paths.owner(shard), version=stat.version))
            for result in deletes:
                try:
                    result.get()
                except NoNodeError:
                    pass

        self._retry(attempt, interruptible=interruptible)

    def _track_pollers(self) -> None:
        pollers = self._read_members(self._paths.pollers, watch=self._on_watch)
        if pollers != self._last_pollers:
            self._last_pollers = pollers
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._call_poller_listeners, pollers)
            except RuntimeError:
                pass

    # --- the elector: leadership as a lifecycle --------------------------------

    def _run_elector(self) -> None:
        assert self._client is not None
        while not self._leader_stop.is_set():
            lock = self._client.Lock(self._paths.leader, self._node_id)
            with self._lock:
                self._election_lock = lock
            if self._leader_stop.is_set():
                break
            try:
                if not lock.acquire():
                    continue
            except LockCancelled:
                break
            except KazooException as e:
                if not self._leader_stop.is_set():
                    log.info("coordination: %s election: %r; standing again", self._node_id, e)
                    self._leader_stop.wait(0.5)
                continue
            with self._lock:
                gen = self._gen
            try:
                self._lead(lock, gen)
            except (KazooException, InterruptedError) as e:
                if not self._leader_stop.is_set():
                    log.info("coordination: %s term ended: %r; standing again", self._node_id, e)
            except Exception:
                log.exception("coordination: %s leadership failed", self._node_id)
            finally:
                self.term = 0
                self._resign(lock, gen)

    def _lead(self, lock: Lock, gen: int) -> None:
        """One term: from winning the election until the session is lost, the
        epoch moves past the term, or the node stops. While the connection is
        suspended the leader does nothing."""
        assert self._client is not None
        node = f"{self._paths.leader}/{lock.node}"
        stat = self._retry(self._client.exists, node)
        with self._lock:
            if stat is None or stat.ephemeralOwner != self._session_id() or gen != self._gen:
                return  # won in a session that is already gone
        term, epoch_version = self._bump(self._paths.epoch, "epoch")
        self.term = term
        log.info("coordination: %s leads, epoch %d", self._node_id, term)
        while True:
            with self._lock:
                if gen != self._gen:
                    log.warning(
                        "coordination: %s lost its session: no longer leader", self._node_id
                    )
                    return
                connected = self._connected
            if self._leader_stop.is_set():
                if connected:
                    try:
                        self._publish(term, epoch_version)
                    except (KazooException, _Deposed) as e:
                        log.info("coordination: last assignment not published: %r", e)
                return
            if not connected:
                self._leader_wake.wait(0.5)
                self._leader_wake.clear()
                continue
            self._leader_wake.clear()
            try:
                self._publish(term, epoch_version)
            except _Deposed:
                log.warning("coordination: %s deposed (epoch moved past %d)", self._node_id, term)
                return
            except InterruptedError:
                continue
            except KazooException as e:
                log.info("coordination: %s publish: %r; again shortly", self._node_id, e)
                self._leader_wake.wait(0.2)
                continue
            self._leader_wake.wait(self._resync_interval)

    def _publish(self, term: int, epoch_version: int) -> bool:
        """Writes the assignment for the live pollers if it changed; True if written.
        The write is a transaction that also checks the epoch node is still at
        this term's version: a deposed leader's write fails (``_Deposed``)."""
        assert self._client is not None and self._shard_count is not None
        zk = self._client
        shard_count = self._shard_count

        def attempt() -> bool:
            pollers = zk.get_children(self._paths.pollers, watch=self._on_leader_watch)
            epoch, current, version = self._read_assignment()
            if epoch > term:
                raise _Deposed()
            owners = balance_shards(current, pollers, shard_count)
            if epoch == term and owners == current:
                return False
            tx = zk.transaction()
            tx.check(self._paths.epoch, epoch_version)
            tx.set_data(
                self._paths.assignment,
                _dump(
                    {
                        "epoch": term,
                        "leader": self._node_id,
                        "owners": {str(s): p for s, p in owners.items()},
                    }
                ),
                version=version,
            )
            checked, written = tx.commit()
            if isinstance(checked, Exception):
                raise _Deposed()
            if isinstance(written, Exception):
                raise ForceRetryError()
            moved = sum(1 for s, p in owners.items() if current.get(s) != p)
            log.info(
                "coordination: epoch %d assignment: %d pollers, %d shards moved",
                term,
                len(set(pollers)),
                moved,
            )
            return True

        return self._retry(attempt)

    def _resign(self, lock: Lock, gen: int) -> None:
        """Deletes this term's election node while its session (``gen``) lives: a
        node left behind would make every later contender, this one included,
        wait forever."""
        assert self._client is not None
        if lock.node is None:
            return
        path = f"{self._paths.leader}/{lock.node}"
        while True:
            with self._lock:
                if gen != self._gen:
                    return  # the session, and the node with it, is gone
            try:
                self._retry(self._delete_own, path, interruptible=False)
                return
            except KazooException as e:
                if not self._client.connected and self._stopping.is_set():
                    return  # closing the client ends the session
                log.warning("coordination: cannot resign yet (%r); trying again", e)
                self._stopping.wait(0.2)

"""Leader election and the leader's term, as a lifecycle.

Election is kazoo's ``Lock`` recipe on ``leader/``: the lowest contender leads.
Leadership is a lifecycle, run by the elector thread:

- elected -> start: check the win belongs to the live session, bump ``epoch``
  (version-checked; the new value is the term), then publish the assignment;
- while leading: recompute the assignment (``balance_shards``) at every change
  of ``members/pollers`` (and every resync interval), and write it with the term
  in a transaction that checks the ``epoch`` node's version, so a deposed
  leader's write fails and it steps down;
- SUSPENDED -> stop acting: publish nothing until connected again;
- LOST -> drop everything: the term ends, the node stands again in the new
  session (a new election node, and a new term if it wins);
- stop -> publish a last assignment without this node (when connected), then
  resign: the election node is deleted while the session lives, so the next
  contender takes over without waiting for the session to expire.

``term`` is the epoch this node leads under, 0 while it does not lead; only the
elector thread writes it.
"""

from __future__ import annotations

import logging
import threading

from kazoo.exceptions import CancelledError as LockCancelled
from kazoo.exceptions import KazooException
from kazoo.protocol.states import WatchedEvent
from kazoo.recipe.lock import Lock
from kazoo.retry import ForceRetryError

from shardcron.coordinator.zk.balance import balance_shards
from shardcron.coordinator.zk.layout import ZkPaths, assignment_data, read_assignment
from shardcron.coordinator.zk.session import Session

log = logging.getLogger("shardcron.coordination")


class _Deposed(Exception):
    """The epoch moved past this leader's term: someone else leads now."""


class Leadership:
    """This node standing for leader, and leading, on its own thread."""

    def __init__(
        self,
        session: Session,
        paths: ZkPaths,
        *,
        node_id: str,
        shard_count: int,
        resync_interval: float,
    ) -> None:
        self._session = session
        self._paths = paths
        self._node_id = node_id
        self._shard_count = shard_count
        self._resync_interval = resync_interval
        self.term = 0
        self._wake = threading.Event()  # a state change or a change of the pollers
        self._stop = threading.Event()
        # Guards _election: the elector replaces it, stop() cancels it.
        self._lock = threading.Lock()
        self._election: Lock | None = None
        self._thread: threading.Thread | None = None
        session.on_state(lambda _: self._wake.set())

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"zk-elect-{self._node_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Publishes a last assignment (if leading and connected), resigns, and
        leaves the election; returns once the elector ended (or a session
        timeout, at most, when cut off)."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            election = self._election
        if election is not None:
            election.cancel()
        self.join(self._session.timeout if self._session.client.connected else 0.2)

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _on_watch(self, event: WatchedEvent) -> None:
        self._wake.set()

    def _run(self) -> None:
        client = self._session.client
        while not self._stop.is_set():
            election = client.Lock(self._paths.leader, self._node_id)
            with self._lock:
                self._election = election
            if self._stop.is_set():
                break
            try:
                if not election.acquire():
                    continue
            except LockCancelled:
                break
            except KazooException as e:
                if not self._stop.is_set():
                    log.info("coordination: %s election: %r; standing again", self._node_id, e)
                    self._stop.wait(0.5)
                continue
            with self._session.lock:
                generation = self._session.generation
            try:
                self._lead(election, generation)
            except (KazooException, InterruptedError) as e:
                if not self._stop.is_set():
                    log.info("coordination: %s term ended: %r; standing again", self._node_id, e)
            except Exception:
                log.exception("coordination: %s leadership failed", self._node_id)
            finally:
                self.term = 0
                self._resign(election, generation)

    def _lead(self, election: Lock, generation: int) -> None:
        """One term: from winning the election until the session is lost, the
        epoch moves past the term, or the node stops. While the connection is
        suspended the leader does nothing."""
        session = self._session
        node = f"{self._paths.leader}/{election.node}"
        stat = session.retry(session.client.exists, node)
        with session.lock:
            if (
                stat is None
                or stat.ephemeralOwner != session.session_id()
                or generation != session.generation
            ):
                return  # won in a session that is already gone
        term, epoch_version = session.bump(self._paths.epoch, "epoch")
        self.term = term
        log.info("coordination: %s leads, epoch %d", self._node_id, term)
        while True:
            with session.lock:
                if generation != session.generation:
                    log.warning(
                        "coordination: %s lost its session: no longer leader", self._node_id
                    )
                    return
                connected = session.connected
            if self._stop.is_set():
                if connected:
                    try:
                        self._publish(term, epoch_version)
                    except (KazooException, _Deposed) as e:
                        log.info("coordination: last assignment not published: %r", e)
                return
            if not connected:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            self._wake.clear()
            try:
                self._publish(term, epoch_version)
            except _Deposed:
                log.warning("coordination: %s deposed (epoch moved past %d)", self._node_id, term)
                return
            except InterruptedError:
                continue
            except KazooException as e:
                log.info("coordination: %s publish: %r; again shortly", self._node_id, e)
                self._wake.wait(0.2)
                continue
            self._wake.wait(self._resync_interval)

    def _publish(self, term: int, epoch_version: int) -> bool:
        """Writes the assignment for the live pollers if it changed; True if written.
        The write is a transaction that also checks the epoch node is still at
        this term's version: a deposed leader's write fails (``_Deposed``)."""
        zk = self._session.client

        def attempt() -> bool:
            pollers = zk.get_children(self._paths.pollers, watch=self._on_watch)
            epoch, current, version = read_assignment(zk, self._paths)
            if epoch > term:
                raise _Deposed()
            owners = balance_shards(current, pollers, self._shard_count)
            if epoch == term and owners == current:
                return False
            tx = zk.transaction()
            tx.check(self._paths.epoch, epoch_version)
            tx.set_data(
                self._paths.assignment,
                assignment_data(term, self._node_id, owners),
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

        return self._session.retry(attempt)

    def _resign(self, election: Lock, generation: int) -> None:
        """Deletes this term's election node while its session (``generation``)
        lives: a node left behind would make every later contender, this one
        included, wait forever."""
        session = self._session
        if election.node is None:
            return
        path = f"{self._paths.leader}/{election.node}"
        while True:
            with session.lock:
                if generation != session.generation:
                    return  # the session, and the node with it, is gone
            try:
                session.retry(session.delete_own, path, interruptible=False)
                return
            except KazooException as e:
                if not session.client.connected and session.stopping.is_set():
                    return  # closing the client ends the session
                log.warning("coordination: cannot resign yet (%r); trying again", e)
                session.stopping.wait(0.2)

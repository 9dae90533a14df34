"""The reconciler thread: brings this node's membership and shards in line with
ZooKeeper, one step per wake-up.

A step: nothing while disconnected (a state change wakes it); a poller that has
not joined the current session joins it (new fencing epoch, then its member
node); every worker not announced in this session is; a poller then reconciles
its shards with the assignment; and the live pollers are handed to the
``watch_pollers`` listeners if they changed. Wake-ups are messages on one queue
(state changes, watches, ``start``, ``stop``, ``watch_pollers``); a burst of them
makes one step, and a step also runs every resync interval. A step that fails
is tried again shortly; one whose session went away starts over at once.
"""

from __future__ import annotations

import logging
import queue
import threading

from kazoo.exceptions import KazooException
from kazoo.protocol.states import WatchedEvent

from shardcron.coordinator.zk.delivery import PollersFeed
from shardcron.coordinator.zk.membership import Membership
from shardcron.coordinator.zk.ownership import ShardOwnership
from shardcron.coordinator.zk.session import Session, SessionChanged

log = logging.getLogger("shardcron.coordination")


class Wakeups:
    """The reconciler's inbox: any thread asks for a step; a burst makes one."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()

    def wake(self, why: str) -> None:
        self._queue.put(why)

    def on_watch(self, event: WatchedEvent) -> None:
        """A ZooKeeper watch (kazoo's event thread)."""
        self.wake(f"watch {event.type} {event.path}")

    def wait(self, timeout: float) -> None:
        """Returns at the next wake-up, or after ``timeout``; drops the burst."""
        try:
            self._queue.get(timeout=timeout)
        except queue.Empty:
            pass
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break


class Reconciler:
    """The thread that runs every step. The poller's membership and ``ownership``
    belong to it alone (a poller's first join runs in ``start`` before it exists)."""

    def __init__(
        self,
        session: Session,
        wakeups: Wakeups,
        membership: Membership,
        pollers_feed: PollersFeed,
        *,
        ownership: ShardOwnership | None,
        poller_id: str | None,
        resync_interval: float,
    ) -> None:
        self._session = session
        self._wakeups = wakeups
        self._membership = membership
        self._pollers_feed = pollers_feed
        self._ownership = ownership
        self._poller_id = poller_id
        self._resync_interval = resync_interval
        self._thread = threading.Thread()
        self._joined: int | None = None  # the session generation this poller joined
        session.on_state(lambda state: wakeups.wake(f"state {state}"))

    def join_poller(self, generation: int) -> None:
        """Joins the cluster as a poller in session ``generation``: a new fencing
        epoch, then the member node (other nodes learn of this poller only once
        its tokens are sure to beat every earlier poller's). Raises
        ``SessionChanged`` if that session is gone."""
        assert self._ownership is not None
        fencing_epoch = self._membership.next_fencing_epoch()
        self._ownership.rejoin(fencing_epoch, generation)
        self._joined = generation
        self._membership.announce_poller()
        log.info(
            "coordination: poller %s joined (fencing epoch %d)", self._poller_id, fencing_epoch
        )

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"zk-reconcile-{self._session.node_id}", daemon=True
        )
        self._thread.start()

    def wait_ended(self, timeout: float) -> bool:
        """Waits for the thread to end; whether it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        stopping = self._session.stopping
        wake = self._wakeups.wake
        while not stopping.is_set():
            self._wakeups.wait(self._resync_interval)
            if stopping.is_set():
                break
            try:
                self._step()
            except InterruptedError:
                break
            except SessionChanged:
                wake("session changed")
            except KazooException as e:
                if not stopping.is_set():
                    log.info(
                        "coordination: %s reconcile: %r; again shortly", self._session.node_id, e
                    )
                    stopping.wait(0.2)
                    wake("retry")
            except Exception:
                log.exception(
                    "coordination: %s reconcile failed; again shortly", self._session.node_id
                )
                stopping.wait(1.0)
                wake("retry")

    def _step(self) -> None:
        with self._session.lock:
            generation, connected = self._session.generation, self._session.connected
        if not connected:
            return  # a state change wakes us
        if self._ownership is not None and self._joined != generation:
            self.join_poller(generation)
        self._membership.announce_workers()
        if self._ownership is not None and self._membership.poller_node_held():
            self._ownership.reconcile(generation)
        if self._pollers_feed.watched.is_set():
            self._membership.track_pollers()

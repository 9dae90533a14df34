"""Delivery: what ZooKeeper's threads learn, handed to the listeners on the loop.

Every listener runs on the asyncio loop that called ``start`` (the threads queue
calls with ``loop.call_soon_threadsafe``), in the order they were queued, never
two at once. For a poller's Assignments (``AssignmentFeed``) it guarantees:

- an assignment is queued only when it differs from the last one queued, and
  never from a session that is gone: the generation is checked under the
  session's lock, so a late assignment cannot overtake the reaction to
  SUSPENDED or LOST;
- no assignment is queued active while the connection is not CONNECTED;
- SUSPENDED: the last assignment again, inactive (the same shards: the session
  may come back); LOST: an empty, inactive one at once; ``close``: a last empty,
  inactive one, then nothing more;
- the queuing thread gets a ``threading.Event`` set once every listener ran and
  every awaitable a listener returned is done: a lost shard is released only
  after that.

``PollersFeed`` hands the live pollers to ``watch_pollers`` listeners after
every change.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import threading
from typing import Any

from kazoo.client import KazooState

from shardcron.coordinator.coordination import (
    Assignment,
    AssignmentListener,
    Member,
    PollersListener,
)
from shardcron.coordinator.zk.session import Session, SessionChanged

log = logging.getLogger("shardcron.coordination")


class AssignmentFeed:
    """A poller's Assignments, from the reconciler, the state hooks and ``stop``
    to the listeners on the loop."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._loop: asyncio.AbstractEventLoop | None = None  # set before any thread queues
        self._listeners: list[AssignmentListener] = []  # the loop's
        # Guarded by session.lock:
        self._delivered: Assignment | None = None
        self._closed = False
        self._epoch = 0  # the terms an empty assignment carries (LOST, close)
        self._fencing_epoch = 0
        session.on_state(self._on_state_locked)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def subscribe(self, listener: AssignmentListener) -> None:
        self._listeners.append(listener)

    def set_epoch(self, epoch: int) -> None:
        """The newest assignment epoch the poller has seen."""
        with self._session.lock:
            self._epoch = epoch

    def set_fencing_epoch(self, fencing_epoch: int, generation: int) -> None:
        """The fencing epoch the poller joined session ``generation`` with. Raises
        ``SessionChanged`` if that session is gone."""
        with self._session.lock:
            if generation != self._session.generation:
                raise SessionChanged()
            self._fencing_epoch = fencing_epoch

    def deliver(self, assignment: Assignment, generation: int) -> threading.Event:
        """Queues ``assignment`` (see the module docstring); returns an event set
        once the listeners are done with it. Raises ``SessionChanged`` if session
        ``generation`` is gone."""
        with self._session.lock:
            done = self._deliver_locked(assignment, generation=generation)
        if done is None:
            raise SessionChanged()
        return done

    def close(self) -> threading.Event | None:
        """Queues the last, empty and inactive, assignment; nothing is queued after
        it. Returns an event set once the listeners are done with it."""
        with self._session.lock:
            done = self._deliver_locked(self._empty(), generation=None)
            self._closed = True
        return done

    def _empty(self) -> Assignment:
        return Assignment(
            epoch=self._epoch, fencing_epoch=self._fencing_epoch, shards=frozenset(), active=False
        )

    def _on_state_locked(self, state: str) -> None:
        delivered = self._delivered
        if delivered is None:
            return
        if state == KazooState.SUSPENDED and delivered.active:
            # Do not trust what we hold until the session is known to be alive.
            self._deliver_locked(dataclasses.replace(delivered, active=False))
        elif state == KazooState.LOST and not self._session.stopping.is_set():
            self._deliver_locked(self._empty())  # every shard went with the session

    def _deliver_locked(
        self, assignment: Assignment, *, generation: int | None = None
    ) -> threading.Event | None:
        """Queues ``assignment`` unless it is stale (``generation`` is not the
        current session's) or the same as the last one; None if it was stale."""
        if self._closed or (generation is not None and generation != self._session.generation):
            return None
        if assignment.active and not self._session.connected:
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


class PollersFeed:
    """The live pollers, from the reconciler to the ``watch_pollers`` listeners.
    Everything but ``post`` and ``watched`` belongs to the loop."""

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[PollersListener] = []
        self._last: list[Member] | None = None
        # Set at the first listener: only then does the reconciler track pollers.
        self.watched = threading.Event()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def watch(self, listener: PollersListener) -> bool:
        """Adds ``listener`` and, if the pollers are known, calls it soon with
        them; False if they are not known yet (the reconciler must look)."""
        self._listeners.append(listener)
        self.watched.set()
        if self._last is None:
            return False
        asyncio.get_running_loop().call_soon(listener, list(self._last))
        return True

    def post(self, pollers: list[Member]) -> None:
        """Hands a new list of live pollers to the loop (any thread)."""
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._call_listeners, pollers)
        except RuntimeError:
            pass

    def _call_listeners(self, pollers: list[Member]) -> None:
        if self._stopping.is_set():
            return
        self._last = pollers
        for listener in self._listeners:
            try:
                listener(list(pollers))
            except Exception:
                log.exception("coordination: pollers listener failed")

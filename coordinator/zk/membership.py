"""Membership: the ephemeral member nodes of this node's poller and workers, and
the live pollers that workers discover.

What it guarantees:

- a poller joins every session with a fencing epoch greater than any poller in
  the cluster had before (``fencing``, bumped version-checked), and creates its
  member node only after that: other nodes learn of it only once its lease
  tokens beat those of every earlier owner of any shard;
- member nodes (``{"address": ..., ...info}``) are ephemeral: they go with the
  session or at ``leave``, and are created again in each new session (the
  poller's at its rejoin, each worker's by itself);
- a member node that another session holds (an earlier run of the same id) is
  waited for, never taken over: a watch wakes the reconciler when it goes;
- the live pollers (id and address) reach the ``watch_pollers`` listeners after
  every change.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from shardcron.coordinator.coordination import Member
from shardcron.coordinator.zk.delivery import PollersFeed
from shardcron.coordinator.zk.layout import Watch, ZkPaths, member_data, read_members
from shardcron.coordinator.zk.session import Session

log = logging.getLogger("shardcron.coordination")


class Membership:
    """This node's member nodes. Poller membership and poller tracking belong to
    the reconciler thread; workers are announced by the reconciler and by
    ``register_worker`` (through an executor thread) alike."""

    def __init__(
        self,
        session: Session,
        paths: ZkPaths,
        *,
        poller_id: str | None,
        poller_address: str,
        pollers_feed: PollersFeed,
        watch: Watch,
    ) -> None:
        self._session = session
        self._paths = paths
        self._poller_id = poller_id
        self._poller_address = poller_address
        self._pollers_feed = pollers_feed
        self._watch = watch
        # Guards _workers and _announced: both the reconciler and register_worker announce.
        self._lock = threading.Lock()
        self._workers: dict[str, Member] = {}
        self._announced: dict[str, int] = {}  # worker id -> the generation its node was made in
        # The reconciler's (the first join runs in start(), before the reconciler exists).
        self._poller_node_held = False
        self._pollers_posted: list[Member] | None = None

    # --- the poller ---------------------------------------------------------------

    def next_fencing_epoch(self) -> int:
        """A fencing epoch greater than any poller's before: the first step of a join."""
        fencing_epoch, _ = self._session.bump(self._paths.fencing, "fencing_epoch")
        return fencing_epoch

    def announce_poller(self) -> bool:
        """Creates this poller's member node (the last step of a join); False while
        another session holds it."""
        assert self._poller_id is not None
        path = self._paths.poller(self._poller_id)
        data = member_data(self._poller_address)
        # A create that fails must not leave an earlier session's node counted as held.
        self._poller_node_held = False
        self._poller_node_held = self._session.create_ephemeral(path, data, self._watch)
        if not self._poller_node_held:
            log.warning(
                "coordination: %s is held by another session (an earlier run of this poller?); "
                "waiting for it to go",
                path,
            )
        return self._poller_node_held

    def poller_node_held(self) -> bool:
        """Whether this poller is a member in this session, announcing it if not yet."""
        return self._poller_node_held or self.announce_poller()

    # --- workers ------------------------------------------------------------------

    def add_worker(self, worker_id: str, address: str, info: Mapping[str, Any] | None) -> None:
        with self._lock:
            self._workers[worker_id] = Member(id=worker_id, address=address, info=dict(info or {}))

    def announce_workers(self) -> None:
        """Creates the member node of every worker not announced in this session yet."""
        generation = self._session.generation
        with self._lock:
            waiting = [m for w, m in self._workers.items() if self._announced.get(w) != generation]
        for member in waiting:
            path = self._paths.worker(member.id)
            if self._session.create_ephemeral(
                path, member_data(member.address, member.info), self._watch
            ):
                with self._lock:
                    self._announced[member.id] = generation
            else:
                log.warning(
                    "coordination: %s is held by another session; waiting for it to go", path
                )

    # --- leaving --------------------------------------------------------------------

    def leave(self) -> None:
        """Deletes the member nodes this session holds, so others need not wait
        for the session to expire."""
        if self._poller_id is not None:
            self._delete(self._paths.poller(self._poller_id))
        with self._lock:
            worker_ids = list(self._workers)
        for worker_id in worker_ids:
            self._delete(self._paths.worker(worker_id))

    def _delete(self, path: str) -> None:
        self._session.retry(self._session.delete_own, path, interruptible=False)

    # --- discovery --------------------------------------------------------------

    def track_pollers(self) -> None:
        """Reads the live pollers (and watches them); hands them to the loop if they changed."""
        pollers = read_members(self._session.client, self._paths.pollers, watch=self._watch)
        if pollers != self._pollers_posted:
            self._pollers_posted = pollers
            self._pollers_feed.post(pollers)

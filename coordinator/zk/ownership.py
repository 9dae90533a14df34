"""Shard ownership hand-over: the ephemeral ``owners/<shard>`` nodes a poller holds.

What it guarantees:

- a poller serves a shard only while the newest assignment gives it the shard
  AND its session holds ``owners/<shard>``; while another session holds that
  node (the previous owner, not done yet) it waits, with a watch, until the node
  goes: released, or its session expired. So no shard is served by two pollers
  at once;
- a poller losing a shard first tells its listeners (the shard leaves its
  Assignment) and waits until they are done (a session timeout at most), and
  only then deletes the node;
- an assignment of an older epoch than one already seen is ignored;
- takes and releases are pipelined and idempotent under retry (a retried
  create that finds this session's node counts the shard as taken), and belong
  to the session that started them.

All state here belongs to the reconciler thread; ``stop`` uses it only after
the reconciler has ended.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError

from shardcron.coordinator.coordination import Assignment
from shardcron.coordinator.zk.delivery import AssignmentFeed
from shardcron.coordinator.zk.layout import Watch, ZkPaths, owner_data, read_assignment
from shardcron.coordinator.zk.session import Session

log = logging.getLogger("shardcron.coordination")


class ShardOwnership:
    """The shards one poller holds, brought in line with the published assignment."""

    def __init__(
        self,
        session: Session,
        paths: ZkPaths,
        feed: AssignmentFeed,
        *,
        poller_id: str,
        shard_count: int,
        watch: Watch,
    ) -> None:
        self._session = session
        self._paths = paths
        self._feed = feed
        self._poller_id = poller_id
        self._shard_count = shard_count
        self._watch = watch
        self._held: set[int] = set()
        self._max_epoch = 0
        self._fencing_epoch = 0

    def rejoin(self, fencing_epoch: int, generation: int) -> None:
        """Starts over in session ``generation`` (its ephemerals are gone) under a
        new fencing epoch. Raises ``SessionChanged`` if that session is gone too."""
        self._feed.set_fencing_epoch(fencing_epoch, generation)
        self._fencing_epoch = fencing_epoch
        self._held.clear()

    def reconcile(self, generation: int) -> None:
        """One step: reads the assignment (and watches it), gives up the shards it
        no longer names, takes those it names, tells the listeners."""
        epoch, owners, _ = read_assignment(self._session.client, self._paths, watch=self._watch)
        if epoch < self._max_epoch:
            log.warning(
                "coordination: ignoring an assignment of epoch %d < %d", epoch, self._max_epoch
            )
            return
        self._max_epoch = epoch
        self._feed.set_epoch(epoch)
        if epoch == 0:
            return  # no leader has assigned anything yet
        mine = {s for s, p in owners.items() if p == self._poller_id and 0 <= s < self._shard_count}
        fencing_epoch = self._fencing_epoch
        lost = self._held - mine
        if lost:
            kept = frozenset(self._held - lost)
            done = self._feed.deliver(
                Assignment(epoch=epoch, fencing_epoch=fencing_epoch, shards=kept), generation
            )
            if not done.wait(self._session.timeout):
                log.warning("coordination: the poller did not take its new assignment in time")
            self.release(sorted(lost))
            self._held -= lost
            log.info("coordination: %s released shards %s", self._poller_id, sorted(lost))
        wanted = sorted(mine - self._held)
        if wanted:
            taken = self._take(wanted, fencing_epoch, generation)
            self._held.update(taken)
            if taken:
                log.info("coordination: %s took shards %s", self._poller_id, taken)
        self._feed.deliver(
            Assignment(epoch=epoch, fencing_epoch=fencing_epoch, shards=frozenset(self._held)),
            generation,
        )

    def release_all(self) -> None:
        """Deletes every owner node this poller holds (on stop: not interruptible)."""
        self.release(sorted(self._held), interruptible=False)

    def _take(self, shards: list[int], fencing_epoch: int, generation: int) -> list[int]:
        """Creates ``owners/<shard>`` for each shard (pipelined); returns those this
        session holds. A shard another session holds gets a watch that wakes the
        reconciler when it goes. Idempotent under retry: a retried create that
        finds its own node counts it as taken."""
        zk = self._session.client
        data = owner_data(self._poller_id, fencing_epoch)
        taken: set[int] = set()

        def attempt() -> None:
            self._session.check(generation)
            session = self._session.session_id()
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
                    stat = zk.exists(self._paths.owner(shard), watch=self._watch)
                    if stat is None:
                        vanished = True  # released in between: try again now
                    elif stat.ephemeralOwner == session:
                        taken.add(shard)
            if vanished:
                raise ForceRetryError()

        self._session.retry(attempt)
        return sorted(taken)

    def release(self, shards: list[int], *, interruptible: bool = True) -> None:
        """Deletes the ``owners/<shard>`` nodes this session holds (pipelined, idempotent)."""
        zk = self._session.client

        def attempt() -> None:
            session = self._session.session_id()
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

        self._session.retry(attempt, interruptible=interruptible)

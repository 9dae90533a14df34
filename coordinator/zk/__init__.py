"""ZooKeeper coordination for a shardcron cluster (kazoo), one module per responsibility.

Layout under ``/shardcron/<cluster>`` (``layout``; the root's data:
``{"shard_count": S}``, so nodes configured with another S refuse to start):

- ``leader/``           kazoo ``Lock`` contenders; the lowest holds the term
- ``epoch``             ``{"epoch": n, ...}``: the term, bumped (version-checked) by each new leader
- ``fencing``           ``{"fencing_epoch": n, ...}``: bumped by every poller (re)join; lease
                        tokens carry it, so a later owner always out-tokens an earlier one
- ``members/pollers/<id>``, ``members/workers/<id>``  ephemeral, ``{"address": ..., ...info}``
- ``assignment``        ``{"epoch": term, "leader": id, "owners": {"<shard>": poller_id}}``,
                        written only by the leader in a transaction that checks the epoch
                        node's version, so a deposed leader's write fails
- ``owners/<shard>``    ephemeral ``{"poller": id, "fencing_epoch": n}``, held by the poller
                        serving the shard

Modules, each saying what it guarantees:

- ``session``: the kazoo client, connection states (SUSPENDED: stop trusting
  ownership; LOST: ephemerals gone, a new generation), the ownership clock;
- ``membership``: the member nodes of this node's poller and workers; pollers
  discovered by workers;
- ``ownership``: a poller's ``owners/<shard>`` nodes and the hand-over between pollers;
- ``leadership``: election, the term, and the assignment the leader publishes;
- ``balance``: the balanced, least-movement assignment (pure);
- ``delivery``: assignments and pollers handed to the listeners on the loop;
- ``views``: the view and the live pollers, served from the last read until a
  watch set by that read fires or the connection changes state;
- ``reconciler``: the thread that drives membership and ownership;
- ``coordination``: ``ZkCoordination``, which composes them into the
  ``Coordination`` protocol.

Threads
-------

Which thread runs what, and which state it owns:

- the asyncio loop that called ``start``: the protocol's methods and every
  listener (``delivery``). Owns the listeners and the pollers last delivered.
- executor threads (``asyncio.to_thread``): ``start`` (connect, layout, a
  poller's first join, before the reconciler exists), ``stop``, the reads
  (``view``, ``workers``, ``pollers``) and ``register_worker``'s announce.
  Own nothing: they call the parts.
- kazoo's connection thread: the session's state listener and, under
  ``Session.lock``, the state hooks: the new state and generation, the
  SUSPENDED/LOST assignment queued to the loop, wake-ups for the reconciler and
  the elector. Must not block.
- kazoo's event thread: watch callbacks, which only wake the reconciler or the
  elector, or mark what ``views`` holds as changed.
- ``zk-reconcile-<node>`` (``reconciler``): joins, announces workers, takes and
  releases shards, tracks pollers. Owns the poller's join and member node,
  ``ShardOwnership`` (held shards, epochs seen) and the pollers last posted.
- ``zk-elect-<node>`` (``leadership``, coordinator role only): election, term,
  publishing. Owns the election recipe and ``term``.
- ``zk-confirm-<node>`` (``session``): a round trip every sixth of a session
  timeout. Owns the last confirmation, which ``ownership_valid`` reads.

How things cross: the threads reach the loop only through
``loop.call_soon_threadsafe`` (``delivery``); a thread waits for the listeners
on a ``threading.Event`` the loop sets. Wake-ups are messages: a queue for the
reconciler (``Wakeups``), an ``Event`` for the elector. ``stop`` hands the
shards from the reconciler to itself by waiting for that thread to end before
releasing them.

Locks: ``Session.lock`` guards the connection state and the generation, and the
order in which assignments are queued to the loop (so a late assignment cannot
overtake SUSPENDED or LOST); the state hooks run under it. ``Membership``'s lock
guards its worker list and what was announced (the reconciler and
``register_worker`` both announce). ``Leadership``'s lock guards the election
recipe its thread replaces and ``stop`` cancels. Values written by one thread
and read by others (``generation``, ``term``, the confirmation) are single
references, read whole.
"""

from shardcron.coordinator.zk.balance import balance_shards
from shardcron.coordinator.zk.coordination import ROLES, ZkCoordination
from shardcron.coordinator.zk.layout import ZkPaths

__all__ = ["ROLES", "ZkCoordination", "ZkPaths", "balance_shards"]

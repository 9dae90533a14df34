"""The poller role: from the due index of its shards to leases on workers.

The parts that decide take ``now`` and return decisions; one part acts:

- ``events``: what reaches the loop through its inbox (frozen values);
- ``clock``, ``config``: the injected clock and the frozen settings;
- ``fires``: what a due fire leads to (misfires, DST, the window, retries);
- ``lease_book``: tokens, expiries, renewals and adopted orphans (never twice at once);
- ``overlap``: per-job concurrency and overlap policy; ``placement``: ready runs by
  what they need, the worker each goes to, why a run waits, demand;
- ``end_rules``: what a run's end leads to (retry, dead letter, streak, completion);
- ``windows``: which part of each shard's due index to read next, and its cursors;
- ``shards``: the shards served (acquire, release), whether the poller may write
  and send now;
- ``workers``: the book of each worker's capacity, and the ``WorkerLink`` the loop
  sends through;
- ``table``: the runs held, each in one place, and the one writer of them;
  ``turn``: one turn's write set;
- ``due``, ``leasing``, ``ends``: the rules applied to the runs held as they come
  due, are leased and end (``Ends.end``, the one way a run ends);
- ``streams``: what workers say, applied to the runs held;
- ``scans``: a scan's store reads, beside the turns; what they found is held by
  the loop;
- ``job_reads``: jobs read again for runs due, beside the turns; the runs coming due in
  the demand; ``timeline``: a keyed index by time (due times, expiries, deadlines);
- ``loop``: the inbox, the turn and the group commit; with ``scans`` and ``job_reads``
  the only part that calls the store, and it sends nothing that depends on a write
  before the write is durable.

Nothing here speaks gRPC: the lease stream's edge (``coordinator.worker_stream``)
hands the loop typed events and sends what it is given.
"""

from shardcron.coordinator.poller.clock import Clock, SystemClock
from shardcron.coordinator.poller.config import PollerConfig
from shardcron.coordinator.poller.loop import Phase, Poller

__all__ = ["Clock", "Phase", "Poller", "PollerConfig", "SystemClock"]

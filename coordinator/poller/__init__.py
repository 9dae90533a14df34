"""The poller role: from the due index of its shards to leases on workers.

Every run it holds is in the run table, in exactly one place; the rules move runs
through the table's transitions, and one loop owns it all. A module a concept:

- ``loop``: ``Poller``, the inbox, the turn and the group commit;
- ``events``: what reaches the loop through its inbox (frozen values);
- ``clock``, ``config``: the injected clock and the frozen settings;
- ``table``: the runs held (``Slot``), each in one ``Place``, and ``RunTable``, the
  only writer of a run's place and record, its indexes kept in step (``check``);
- ``timeline``: a keyed index by time (due times, expiries, deadlines, ready lanes);
- ``due``: what happens to a run when it comes due (its trigger, starting deadlines);
- ``fires``: what a due fire leads to (misfires, DST, the window, retries), pure;
- ``overlap``: per-job concurrency and overlap policy, decided in one function;
- ``placement``: ready runs by what they need, the worker each goes to, why a run
  waits, demand;
- ``leasing``: leases granted, sent and taken back when they expire; waiting gauges;
- ``lease_book``: fencing tokens, expiries, renewals, orphans (never twice at once);
- ``lease_grants``: what a lease carries to its worker;
- ``ends``: ``Ends.end``, the one way a held run ends, and what every end leads to;
- ``end_rules``: how a run ends and what follows (retry, dead letter, streak,
  completion), pure;
- ``faults``: a fault in the rules kept to its run;
- ``crowded_instants``: instants many runs are due at, reached ahead of the lead;
- ``streams``: what workers say, applied to the runs held; ``workers``: each
  worker's book, and the ``WorkerLink`` the loop sends through;
- ``shards``: the shards served (acquire, release), whether the poller may write
  and send now; ``windows``: which part of each shard's due index to read next;
- ``scans``, ``job_reads``: the store reads beside the turns (the due index and its
  runs; the jobs of runs due); with ``loop`` the only parts that call the store;
- ``turn``: what one turn writes, and what it sends once that is durable.

Nothing here speaks gRPC: the lease stream's edge (``coordinator.worker_stream``)
hands the loop typed events and sends what it is given.
"""

from shardcron.coordinator.poller.clock import Clock, SystemClock
from shardcron.coordinator.poller.config import PollerConfig
from shardcron.coordinator.poller.loop import Phase, Poller

__all__ = ["Clock", "Phase", "Poller", "PollerConfig", "SystemClock"]

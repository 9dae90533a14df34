"""The garbage collector's settings for the long-running processes (node, worker).

A node or a worker allocates a few dozen objects per run (domain copies, protobuf
messages, futures) and keeps many alive (every run it holds); with CPython's default
thresholds (700 allocations per young collection) the collector ran thousands of
times per second under load, a cost per job the benchmark's burst (W1) shows. Young
collections are made rarer; what start-up made (modules, configuration) lives as long as the process and is
frozen out of every later collection. Cyclic garbage is still collected, in fewer,
larger passes.

The young threshold counts net allocations (an object freed takes one back), so what
sets it off is a burst of objects alive at once: a batch of 1,000 created jobs or
leased runs holds tens of thousands. At 20,000 most such batches set off a collection
that walked objects still in use; at 100,000 they do not. A young collection walks at
most those 100,000 objects.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 100_000  # net allocations between young collections (CPython: 700)
MIDDLE_THRESHOLD = 20  # young collections between middle ones (CPython: 10)
OLD_THRESHOLD = 20  # middle collections between full ones (CPython: 10)


def tune_collector() -> None:
    """Called once a process has started up, before it serves anything."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)

"""The poller's settings (frozen) and the fixed bounds its rules work within."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from shardcron.coordinator.poller.fires import MISFIRE_GRACE

EPOCH_SHIFT = 32  # a fencing token is fencing_epoch << EPOCH_SHIFT | sequence
MAX_DEFERRED = 100_000  # held leases and results kept to answer once the shards are loaded
JOB_ROW_GRACE = timedelta(seconds=30)  # a run's job row may land this long after the run
JOB_ROW_RETRY = timedelta(milliseconds=500)


@dataclass(frozen=True, slots=True, kw_only=True)
class PollerConfig:
    lease_ttl: timedelta = timedelta(seconds=10)
    heartbeat_interval: timedelta = timedelta(seconds=3)
    lookahead: timedelta = timedelta(seconds=5)  # load runs this far ahead of due
    scan_interval: timedelta = timedelta(seconds=1)
    # Also re-read the recent past of the due index this often, for runs whose
    # creation hint never arrived (api on another node). None: hints are reliable.
    recheck_interval: timedelta | None = None
    recheck_window: timedelta = timedelta(seconds=30)
    # A lease is taken back only this long after it expired: the worker counts its
    # TTL from when the lease reached it, later than the poller granted it.
    expiry_grace: timedelta = timedelta(milliseconds=500)
    misfire_grace: timedelta = MISFIRE_GRACE  # a fire later than this is a misfire
    # Re-read a job from the store when it triggers if the copy held is older than
    # this. None: the api's hints are complete (one process), the copy held is current.
    job_cache_ttl: timedelta | None = None
    max_batch: int = 2000  # runs leased or triggered per turn
    max_loaded: int = 500_000  # runs held in memory before loading pauses
    cursor_save_interval: timedelta = timedelta(seconds=5)

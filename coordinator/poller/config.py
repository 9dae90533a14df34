"""The poller's settings (frozen) and the fixed bounds its rules work within."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from shardcron.client.saturating import saturating_add
from shardcron.coordinator.poller.fires import MISFIRE_GRACE
from shardcron.coordinator.sealing import KeyRing

EPOCH_SHIFT = 32  # a fencing token is fencing_epoch << EPOCH_SHIFT | sequence
MAX_DEFERRED = 100_000  # held leases and results kept to answer once the shards are loaded
JOB_ROW_GRACE = timedelta(seconds=30)  # a run's job row may land this long after the run
JOB_ROW_RETRY = timedelta(milliseconds=500)
# A worker that shares its slots among pollers grants them one round trip after it is
# asked: runs coming due within this of the lease lead count in the demand for them.
DEMAND_AHEAD = timedelta(seconds=2)
COMING_EVERY = 0.2  # seconds: the runs coming due are counted for the demand this often
_LATEST = datetime.max.replace(tzinfo=UTC)  # after every instant, stored ones included


@dataclass(frozen=True, slots=True, kw_only=True)
class PollerConfig:
    lease_ttl: timedelta = timedelta(seconds=10)
    heartbeat_interval: timedelta = timedelta(seconds=3)
    lookahead: timedelta = timedelta(seconds=5)  # load runs this far ahead of due
    # A created run due within this is held from its hint, even past the loaded edge.
    hint_horizon: timedelta = timedelta(minutes=1)
    scan_interval: timedelta = timedelta(seconds=1)
    # A scan reads a shard this far past the lookahead, and a shard is read again only
    # once its loaded edge is less than the lookahead and a scan interval ahead: each
    # shard is read once per this, not once per scan interval (every read of every
    # shard is a store round trip, whatever it finds). A run written after a scan and
    # due before that scan's edge was due within the hint horizon of its create, so its
    # hint holds it: the lookahead, this and a scan interval stay within the horizon.
    scan_reach: timedelta = timedelta(seconds=5)
    # Also re-read the recent past of the due index this often, for runs whose
    # creation hint never arrived (api on another node). None: hints are reliable.
    recheck_interval: timedelta | None = None
    recheck_window: timedelta = timedelta(seconds=30)
    # A re-read leaves to their hint the runs due from this long ago on: their hint
    # is on its way (it follows the create's last write, and the api's node reads
    # them for it), and reading them here too read each new run and job twice. A run
    # whose hint is lost is read by a later re-read, up to this much later.
    hint_grace: timedelta = timedelta(0)
    # A lease is taken back only this long after it expired: what the clocks of the
    # worker and the poller may disagree by, beyond the worker's own safety margin.
    expiry_grace: timedelta = timedelta(milliseconds=500)
    misfire_grace: timedelta = MISFIRE_GRACE  # a fire later than this is a misfire
    # Re-read a job from the store when it triggers if the copy held is older than
    # this. None: the api's hints are complete (one process), the copy held is current.
    job_cache_ttl: timedelta | None = None
    # Runs are triggered and leased this long ahead of their due instant to workers
    # that hold a lease until then (Hello.waits_for_due): the turn's work is done
    # before the instant, so the run starts on it. Zero: at the due instant. It covers
    # the turn of a minute mark of a full batch and its way to the worker on a loaded
    # small machine, with a margin. A lease given ahead holds its worker's slot while
    # it waits.
    lease_lead: timedelta = timedelta(milliseconds=500)
    # With a lease lead, the turn that triggers a run also triggers those due up to this
    # much after it: runs due at instants of their own (one-off jobs due at any
    # millisecond) are triggered, written and leased a window at a time instead of a
    # turn, a commit and a lease message each. They still start on their very instant,
    # held on their worker up to the lead and this window ahead. Zero: one by one.
    trigger_window: timedelta = timedelta(milliseconds=100)
    max_batch: int = 2000  # runs leased or triggered per turn
    secret_keys: KeyRing | None = None  # opens sealed secret env values for leases
    # An instant many runs are due at is reached this much earlier per run, up to
    # crowd_lead_most ahead (``crowded_instants``): per run, what a full turn, its commit
    # and its leases take on a small machine, with room for other processes.
    crowd_lead_per_run: timedelta = timedelta(microseconds=400)
    crowd_lead_most: timedelta = timedelta(seconds=10)
    max_loaded: int = 500_000  # runs held in memory before loading pauses
    # A run's start (RUNNING, its started_at) is written this long after its worker
    # reports it, with what that turn writes, unless the run ended by then: its end
    # record carries the start, so a run shorter than this is written twice (LEASED,
    # its end), not three times. A shard released writes the starts of its runs first.
    # Zero: written in the turn that hears of it.
    start_write_delay: timedelta = timedelta(seconds=1)
    cursor_save_interval: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if self.lookahead + self.scan_reach + self.scan_interval >= self.hint_horizon:
            raise ValueError(
                "the lookahead, the scan reach and a scan interval must stay within the"
                " hint horizon: a run written after a scan and due before its edge would"
                " be neither read nor hinted"
            )

    def job_read_until(self, now: datetime) -> datetime:
        """Runs due by then have their jobs read as they are loaded (from a hint or a
        scan). A later run's job is read as the run triggers (``JobReads``): a copy read
        now would be older than ``job_cache_ttl`` by then, and read again. Such a run
        counts in the demand for room (``job_reads.coming``) from its trigger on, not ahead
        of it: the room comes one round trip later, within the lease lead. Without a
        ``job_cache_ttl`` (the copies held never go stale) every run's job is read as it
        is loaded: the latest instant there is."""
        ttl = self.job_cache_ttl
        if ttl is None:
            return _LATEST
        return saturating_add(now, self.lease_lead + max(ttl, DEMAND_AHEAD))

    @property
    def worker_silence_timeout(self) -> timedelta:
        """A worker that sent nothing for this long is taken for frozen: its stream is
        closed (no new leases go to it). Two missed heartbeats plus half an interval of
        grace: with the heartbeat at a third of the TTL, the stream is closed before any
        of its leases can be taken back, so no retry goes to the frozen worker."""
        return 2 * self.heartbeat_interval + self.heartbeat_interval / 2

"""The workloads of docs/benchmarks.md as plain numbers (``Plan``), and the pure parts every
system's runner shares: W3's open-loop arrival schedule, W4's expected fires, a run's
times as a store holds them (``RunTime``), what counts as a W4 fire (``count_fires``),
and S1's signed fire error (``fire_errors``) and timings (``timing``).

Standard library only: the tests import it without the peers.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

WORKLOADS = ("W1", "W2", "W3", "W4", "W6", "S1")
DEFAULT_WORKLOADS = ("W1", "W2", "W3", "W4", "W6")  # S1 is asked for by name: it is long
W3_SPREAD_S = 5.0  # W3: each job is due 0 to this many seconds after it is submitted
W3_HELD_P99_S = 1.0  # W3: a rate is held when start lag p99 stays under this
W4_CRON = "* * * * *"  # W4: every minute, on the minute (UTC)
S1_DUE_AHEAD_S = 6 * 3600.0  # S1: the stored jobs are due this long after they are created
S1_CRONS = 2_000  # S1: every-minute crons fired beside the stored jobs
S1_MINUTES = 2  # S1: whole minutes the crons are watched
S1_BASELINE = 1_000  # S1: jobs stored when the pages are first timed, to compare with N
# S1's figures (key, what it is, unit): the rows of its table, in this order
S1_FIGURES = (
    ("create_first_tenth_per_s", "creates/s, first tenth", "/s"),
    ("create_per_s", "creates/s, all", "/s"),
    ("rss_mb", "shardcron RSS (the node(s) and their children)", " MB"),
    ("store_server_rss_mb", "store server RSS (Cassandra; apart, heap sized up front)", " MB"),
    ("store_bytes_per_job", "store size per job (data on disk: see config)", " B"),
    ("job_list_first_ms", "`job list` first page (101 jobs, health), first call", " ms"),
    ("job_list_ms", "`job list` first page, median", " ms"),
    ("run_list_pending_ms", "`run list --state PENDING` (20 runs), median", " ms"),
    ("cluster_status_ms", "`cluster status`, median", " ms"),
    ("http_jobs_ms", "dashboard `GET /v1/jobs?withHealth=true`, median", " ms"),
    ("http_overview_ms", "dashboard `GET /v1/overview`, median", " ms"),
    ("cron_fire_p50_ms", f"{S1_CRONS:,} every-minute crons: fire error p50", " ms"),
    ("cron_fire_p99_ms", f"{S1_CRONS:,} every-minute crons: fire error p99", " ms"),
    ("restart_s", "restart after SIGKILL until `job list` is served", " s"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """How big each workload is: jobs for W1, W2, W4 (cron jobs), W6 and S1 (jobs stored);
    for W3 the offered rates and how long each is held; for W4 how many minutes are
    watched."""

    n: dict[str, int]
    w3_rates: tuple[int, ...]
    w3_seconds: float
    w4_minutes: int
    caps: dict[str, int] = field(default_factory=dict)  # jobs, at most, for a slow peer

    def jobs(self, workload: str, capped: bool = False) -> int:
        n = self.n[workload]
        return min(n, self.caps.get(workload, n)) if capped else n

    def describe(self, workloads: tuple[str, ...] = WORKLOADS) -> str:
        """The sizes of ``workloads``, in words, for the report."""
        said = {
            "W1": f"W1 {self.n['W1']:,} jobs",
            "W2": f"W2 {self.n['W2']:,} jobs",
            "W3": "W3 "
            + ", ".join(f"{r:,}" for r in self.w3_rates)
            + f" jobs/s, {self.w3_seconds:.0f} s each",
            "W4": f"W4 {self.n['W4']:,} cron jobs x {self.w4_minutes} minutes",
            "W6": f"W6 {self.n['W6']:,} jobs",
            "S1": f"S1 {self.n['S1']:,} jobs stored, {S1_CRONS:,} crons x {S1_MINUTES} minutes",
        }
        return "; ".join(said[w] for w in workloads if w in said)


FULL = Plan(
    n={"W1": 100_000, "W2": 50_000, "W4": 10_000, "W6": 10_000, "S1": 1_000_000},
    w3_rates=(100, 1_000, 5_000, 10_000),
    w3_seconds=60.0,
    w4_minutes=5,
)
QUICK = Plan(
    n={"W1": 10_000, "W2": 5_000, "W4": 2_000, "W6": 10_000, "S1": 100_000},
    w3_rates=(100, 1_000),
    w3_seconds=10.0,
    w4_minutes=2,
)


def arrivals(rate: float, seconds: float, seed: int = 0) -> list[tuple[float, float]]:
    """W3's open-loop schedule: (submit offset, due offset) in seconds from the start,
    ``rate`` jobs per second evenly spaced for ``seconds``, each due 0 to
    ``W3_SPREAD_S`` after its submit (uniform, seeded so runs compare)."""
    rng = random.Random(seed)
    count = int(rate * seconds)
    return [(i / rate, i / rate + rng.uniform(0.0, W3_SPREAD_S)) for i in range(count)]


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99 and max of ``values`` (seconds); empty if there are none."""
    if not values:
        return {}
    ordered = sorted(values)
    if len(ordered) == 1:
        v = ordered[0]
        return {"p50": v, "p95": v, "p99": v, "max": v}
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "max": ordered[-1]}


def due_instant(start: float, due: float) -> datetime:
    """The due instant W3's submitters ask for: ``due`` seconds after ``start``."""
    return datetime.fromtimestamp(start + due, UTC)


NOTICE_SPLIT_S = 1.0  # W3's lag is also told apart for runs given this much notice


def notice_note(rate: float, pairs: Sequence[tuple[float, float]]) -> str:
    """W3's start lag at ``rate`` told apart by notice, as a note: from (notice, lag)
    pairs (the notice: a run's due offset less its submit offset), the p99 lag of the
    runs due less than ``NOTICE_SPLIT_S`` after their submit and that of the others."""
    parts = []
    for label, lags in (
        (f"under {NOTICE_SPLIT_S:g} s", [lag for notice, lag in pairs if notice < NOTICE_SPLIT_S]),
        (
            f"{NOTICE_SPLIT_S:g} s or more",
            [lag for notice, lag in pairs if notice >= NOTICE_SPLIT_S],
        ),
    ):
        p99 = percentiles(lags).get("p99")
        parts.append(f"{label}: {len(lags):,} runs" + ("" if p99 is None else f", p99 {p99:.3f} s"))
    return f"at {rate:,.0f} jobs/s, start lag by notice (due less submit offset): " + ", ".join(
        parts
    )


def lag_by_notice(
    rate: float, schedule: Sequence[tuple[float, float]], start: float, runs: Sequence[RunTime]
) -> str:
    """W3's start lag by each run's notice (``notice_note``), for runs read from a store:
    a run is matched to its arrival by its due instant (the microsecond the submitter
    asked for); an unmatched run is left out."""
    notice = {_micros(due_instant(start, due).timestamp()): due - sent for sent, due in schedule}
    pairs = []
    for r in runs:
        given = notice.get(_micros(r.fire_at))
        if given is not None and r.started_at is not None:
            pairs.append((given, r.started_at - r.fire_at))
    return notice_note(rate, pairs)


def _micros(t: float) -> int:
    return round(t * 1_000_000)


def due_batches(
    schedule: list[tuple[float, float]], elapsed: float, sent: int
) -> tuple[list[tuple[float, float]], int]:
    """The arrivals whose submit offset has come by ``elapsed``, beyond the ``sent``
    first ones: (what to send now, how many are sent after it)."""
    end = sent
    while end < len(schedule) and schedule[end][0] <= elapsed:
        end += 1
    return schedule[sent:end], end


def minute_marks(start: float, minutes: int) -> list[float]:
    """W4's expected fires of an every-minute cron: the first ``minutes`` whole minutes
    (epoch seconds) strictly after ``start``."""
    first = (int(start) // 60 + 1) * 60
    return [float(first + 60 * i) for i in range(minutes)]


def held(lag_p99: float | None, ended: int, jobs: int) -> bool:
    """W3: a rate is held when every job ran and start lag p99 stayed under 1 s."""
    return lag_p99 is not None and lag_p99 < W3_HELD_P99_S and ended >= jobs


def highest_held(by_rate: dict[float, tuple[float | None, int, int]]) -> float | None:
    """The highest rate held (rate -> (lag p99, ended, jobs)), None if none was: a rate
    counts only if every lower rate measured was held too."""
    best = None
    for rate in sorted(by_rate):
        if not held(*by_rate[rate]):
            break
        best = rate
    return best


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTime:
    """One run's times as the store holds them, in epoch seconds."""

    job_id: str
    attempt: int
    fire_at: float
    due_at: float
    started_at: float | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> RunTime:
        """From a store's row: (job id, attempt, fire_at, due_at, started_at), times
        in integer microseconds as both stores keep them."""
        job_id, attempt, fire_at, due_at, started_at = row
        return cls(
            job_id=job_id,
            attempt=attempt,
            fire_at=fire_at / 1e6,
            due_at=due_at / 1e6,
            started_at=None if started_at is None else started_at / 1e6,
        )


def count_fires(rows: Sequence[RunTime], marks: Sequence[float]) -> tuple[int, int, list[float]]:
    """W4's fires among ``rows``: a fire is (job, minute of ``marks``), attempt 1 only;
    (fires that started, runs beyond the first of a fire, each started fire's error:
    how far its first start is from the minute, either way: runs are leased ahead of
    their instant, and one that started early counts as one that started late)."""
    per_fire: dict[tuple[str, float], list[float | None]] = {}
    for r in rows:
        if r.attempt == 1 and r.fire_at in marks:
            per_fire.setdefault((r.job_id, r.fire_at), []).append(r.started_at)
    started = {k: [s for s in v if s is not None] for k, v in per_fire.items()}
    errors = [abs(min(v) - fire_at) for (_, fire_at), v in started.items() if v]
    return len(errors), sum(len(v) - 1 for v in per_fire.values()), errors


def fire_errors(rows: Sequence[RunTime], marks: Sequence[float]) -> tuple[list[float], int]:
    """S1's fire error of every-minute crons: for each (job, minute of ``marks``) that
    started, its first start (attempt 1) minus the minute, signed (a run leased ahead
    of its instant may start a moment early); and how many (job, minute) of the jobs
    seen never started. A fire's retries and runs of other minutes are left out."""
    firsts: dict[tuple[str, float], float | None] = {}
    jobs = set()
    for r in rows:
        jobs.add(r.job_id)
        if r.attempt != 1 or r.fire_at not in marks:
            continue
        key = (r.job_id, r.fire_at)
        seen = firsts.get(key)
        if r.started_at is not None and (seen is None or r.started_at < seen):
            firsts[key] = r.started_at
        else:
            firsts.setdefault(key, None)
    errors = [s - at for (_, at), s in firsts.items() if s is not None]
    return errors, len(jobs) * len(marks) - len(errors)


def with_baseline(figures: dict[str, float], baseline: dict[str, float]) -> dict[str, float]:
    """S1's figures and, under ``base_<key>``, the same ones with ``S1_BASELINE`` jobs
    stored."""
    return {**figures, **{f"base_{k}": v for k, v in baseline.items()}}


def timing(samples: Sequence[float]) -> dict[str, float]:
    """A repeated call's timing, seconds: the first call (caches cold), the median and
    the slowest of all; empty if there are none."""
    if not samples:
        return {}
    return {
        "first": samples[0],
        "median": statistics.median(samples),
        "max": max(samples),
    }
